"""Primal network simplex for the assignment problem on a sparse arc set, warm-startable.

The assignment problem min_π Σ_i c_{i,π(i)} over the arcs (i, j) of a candidate set is a
transportation problem on a bipartite graph: rows 0..n−1 with supply 1, columns n..2n−1
with demand 1, uncapacitated arcs row → column. The primal simplex moves between spanning
trees (bases) of this graph; the node potentials π of a tree make every tree arc tight,
c_ij + π_i − π_{n+j} = 0, and the tree is optimal when every other arc has reduced cost
c_ij + π_i − π_{n+j} ≥ 0. In the assignment's dual, u_i = −π_i and v_j = π_{n+j}.

Why a primal simplex: the pipeline's problems are massively degenerate (after the departure
the cost inside a pair of matched clusters varies by 1e-12 of its size), which makes dual
methods (shortest augmenting paths, auctions) search or bid across whole clusters; the primal
simplex only needs a pivot per improving arc, degenerate pivots are cheap, and arcs can be
added between solves without losing the basis (column generation: ``assignment.w2_exact``
prices all N² pairs with the potentials and adds the violated ones).

The starting basis is built from a feasible assignment σ: an extra root node r = 2n with an
arc r → i of zero flow to every row (these arcs can never carry flow, the root having no
supply and no arc into it, so their costs are free: they set the starting potentials, e.g.
from a coarser problem's duals), and the assignment arcs i → n+σ(i) with flow 1. Zero-flow
arcs all point away from the root, so the tree is strongly feasible, and the leaving-arc rule
below keeps it so (Cunningham's rule: of the blocking arcs, the last one met going round the
cycle from its apex in the direction of the flow change), which rules out cycling. Root arcs
that leave the tree never return (they are not priced).

Tree layout (arrays over the 2n + 1 nodes): parent, pred (the tree arc to the parent),
pred_dir (+1: that arc points to the parent, −1: from it), size (nodes in the subtree; the
apex of a cycle is found by climbing from the smaller subtree), children as doubly linked
sibling lists. A pivot re-hangs one subtree: O(path) for the structure and sizes, and the
subtree's potentials shift by one constant. Entering arcs are chosen by block search (the
most negative reduced cost in the first block of ``block`` arcs that has one, blocks taken
round-robin; ``BLOCK_FACTOR``·√arcs by default). Near the end of a solve few arcs are eligible and a
block search scans nearly all arcs for each pivot; a search that needed more than ``SWEEP_BLOCKS``
blocks therefore finishes its pass over the arcs and lists every eligible arc it meets (up to a
block), and the next pivots take the best of the listed arcs that are still eligible, before any new
search. Everything is sequential: the same input gives the same bits.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numba
import numpy as np

#: the tree arc of a node points to its parent (UP) or from it (DOWN)
UP = 1
DOWN = -1
#: arc states: in the tree, or a non-basic arc at flow 0 (arcs are uncapacitated)
TREE = 0
LOWER = 1
#: a block search that scanned more than this many blocks finishes its pass and lists the eligible arcs
#: (measured on the default run's snapshots at N = 4096: a third fewer arcs scanned, 7 % fewer pivots)
SWEEP_BLOCKS = 4
#: the block search's block, times √(arcs): half of the usual √(arcs) scans 28 % fewer arcs for 8 % more
#: pivots on the same snapshots
BLOCK_FACTOR = 0.5

# The kernels' structured arguments (numba compiles a namedtuple of arrays and scalars into one typed argument; the
# kernels unpack them on entry).
#: the arc arrays, over the arcs' capacity (the arcs in use, 0..m−1, come first; the root's arcs are 0..n−1): tail
#: node src, head node tgt, cost, flow, and state (TREE or LOWER)
Arcs = namedtuple("Arcs", "src tgt cost flow state")
#: the spanning tree, arrays over the 2n + 1 nodes (the module's docstring): parent node, pred (the tree arc to the
#: parent), pred_dir (UP or DOWN), size (of the subtree), and the children as first_child and the doubly linked
#: sibling lists next_sib, prev_sib (−1: none)
Tree = namedtuple("Tree", "parent pred pred_dir size first_child next_sib prev_sib")
#: what ``_pivots`` prices and when it stops: arcs n_root_arcs..m−1 are priced, an arc is eligible below −tol, the
#: block search's block, the pivot budget max_pivots, and sweep_after, the arcs a search scans before it finishes
#: its pass and lists the eligible arcs
PivotRule = namedtuple("PivotRule", "n_root_arcs m tol block max_pivots sweep_after")
#: ``_pivots``' work buffers: path and path_b (the two sides of a cycle, 2n + 1 nodes each), stack (a subtree
#: walk, 2n + 1), listed (the eligible arcs a sweep lists, at least one slot)
PivotBuffers = namedtuple("PivotBuffers", "path path_b stack listed")


@numba.njit(cache=True)
def _detach(w, parent, first_child, next_sib, prev_sib):
    p = parent[w]
    if prev_sib[w] >= 0:
        next_sib[prev_sib[w]] = next_sib[w]
    else:
        first_child[p] = next_sib[w]
    if next_sib[w] >= 0:
        prev_sib[next_sib[w]] = prev_sib[w]
    next_sib[w] = -1
    prev_sib[w] = -1


@numba.njit(cache=True)
def _attach(w, p, parent, first_child, next_sib, prev_sib):
    parent[w] = p
    f = first_child[p]
    next_sib[w] = f
    prev_sib[w] = -1
    if f >= 0:
        prev_sib[f] = w
    first_child[p] = w


@numba.njit(cache=True)
def _shift_subtree(r, sigma, first_child, next_sib, pi, stack):
    """Add sigma to the potential of every node of the subtree of r."""
    top = 0
    stack[top] = r
    top += 1
    while top > 0:
        top -= 1
        w = stack[top]
        pi[w] += sigma
        c = first_child[w]
        while c >= 0:
            stack[top] = c
            top += 1
            c = next_sib[c]


@numba.njit(cache=True)
def _potentials_from_root(root, tree, cost, pi, stack, order):
    """Potentials of every node from the root along the tree arcs (each tight), and the subtree sizes.

    Recomputing them from the root removes the rounding that the pivots' shifts accumulate. ``stack`` and
    ``order`` are work arrays over the nodes."""
    parent, pred, pred_dir, size = tree.parent, tree.pred, tree.pred_dir, tree.size
    first_child, next_sib = tree.first_child, tree.next_sib
    n_order = 0
    top = 0
    pi[root] = 0.0
    stack[top] = root
    top += 1
    while top > 0:
        top -= 1
        w = stack[top]
        order[n_order] = w
        n_order += 1
        if w != root:
            p = parent[w]
            if pred_dir[w] == UP:
                pi[w] = pi[p] - cost[pred[w]]
            else:
                pi[w] = pi[p] + cost[pred[w]]
        c = first_child[w]
        while c >= 0:
            stack[top] = c
            top += 1
            c = next_sib[c]
    for t in range(n_order):
        size[order[t]] = 1
    for t in range(n_order - 1, 0, -1):
        w = order[t]
        size[parent[w]] += size[w]
    return n_order


@numba.njit(cache=True)
def _pivots(arcs, tree, pi, rule, buffers, next_arc):
    """Simplex pivots until no priced arc (indices n_root_arcs..m−1 of ``rule``) has reduced cost below −tol.

    The block search starts at arc ``next_arc``. ``buffers.listed`` (at least one slot) holds the eligible arcs
    found by a search that scanned more than ``rule.sweep_after`` arcs (the module's docstring). Returns (pivots,
    degenerate pivots, where the next block search starts)."""
    src, tgt, cost, flow, state = arcs.src, arcs.tgt, arcs.cost, arcs.flow, arcs.state
    parent, pred, pred_dir, size = tree.parent, tree.pred, tree.pred_dir, tree.size
    first_child, next_sib, prev_sib = tree.first_child, tree.next_sib, tree.prev_sib
    n_root_arcs, m, tol, block = rule.n_root_arcs, rule.m, rule.tol, rule.block
    max_pivots, sweep_after = rule.max_pivots, rule.sweep_after
    path, path_b, stack, listed = buffers.path, buffers.path_b, buffers.stack, buffers.listed
    pivots = 0
    degenerate = 0
    total = m - n_root_arcs
    e = next_arc
    if e < n_root_arcs or e >= m:
        e = n_root_arcs
    n_listed = 0
    while pivots < max_pivots:
        e_in = -1
        best = -tol
        # entering arc: the best of the listed arcs that are still eligible (the list keeps those)
        kept = 0
        for t in range(n_listed):
            a = listed[t]
            if state[a] == LOWER:
                rc = cost[a] + pi[src[a]] - pi[tgt[a]]
                if rc < -tol:
                    listed[kept] = a
                    kept += 1
                    if rc < best:
                        best = rc
                        e_in = a
        n_listed = kept
        if e_in < 0:
            # block search: the most negative reduced cost in the first block of arcs that has one
            count = 0
            scanned = 0
            while scanned < total:
                if state[e] == LOWER:
                    rc = cost[e] + pi[src[e]] - pi[tgt[e]]
                    if rc < best:
                        best = rc
                        e_in = e
                scanned += 1
                count += 1
                e += 1
                if e >= m:
                    e = n_root_arcs
                if count >= block:
                    if e_in >= 0:
                        break
                    count = 0
            if e_in < 0:
                return pivots, degenerate, e
            if scanned > sweep_after:
                # eligible arcs are sparse (the last pivots of a solve): finish the pass over all arcs and list
                # every eligible arc it meets, so that the next pivots need no pass of their own
                listed[0] = e_in
                n_listed = 1
                while scanned < total and n_listed < listed.shape[0]:
                    if state[e] == LOWER:
                        rc = cost[e] + pi[src[e]] - pi[tgt[e]]
                        if rc < -tol:
                            listed[n_listed] = e
                            n_listed += 1
                            if rc < best:
                                best = rc
                                e_in = e
                    scanned += 1
                    e += 1
                    if e >= m:
                        e = n_root_arcs
        # the cycle: e_in = first → second, then second ↑ apex ↓ first. The climb records both sides (one
        # chain of dependent parent loads); the walks below read the recorded nodes instead of climbing again
        first = src[e_in]
        second = tgt[e_in]
        a = first
        b = second
        na = 0
        nb = 0
        while a != b:
            if size[a] < size[b]:
                path[na] = a
                na += 1
                a = parent[a]
            else:
                path_b[nb] = b
                nb += 1
                b = parent[b]
        # a == b is the apex, which neither side records
        # leaving arc: the blocking arcs are those the cycle runs against; Cunningham's tie rule
        delta = np.int64(1) << 60
        u_out = -1
        at = -1
        side = 0
        for t in range(na):
            w = path[t]
            if pred_dir[w] == UP:
                f = flow[pred[w]]
                if f < delta:
                    delta = f
                    u_out = w
                    at = t
                    side = 1
        for t in range(nb):
            w = path_b[t]
            if pred_dir[w] == DOWN:
                f = flow[pred[w]]
                if f <= delta:
                    delta = f
                    u_out = w
                    at = t
                    side = 2
        if u_out < 0:  # a cycle of forward arcs only: impossible on a bipartite row → column graph
            return -1, degenerate, e
        if delta > 0:
            flow[e_in] += delta
            for t in range(na):
                w = path[t]
                flow[pred[w]] -= pred_dir[w] * delta
            for t in range(nb):
                w = path_b[t]
                flow[pred[w]] += pred_dir[w] * delta
        else:
            degenerate += 1
        # the subtree of u_out is re-hung below v_in, rooted at u_in: u_in … u_out is the first at + 1 nodes
        # of u_in's side, the nodes above u_out on that side lose the subtree, v_in's whole side gains it
        if side == 1:
            u_in = first
            v_in = second
            up = path
            n_up = na
            down = path_b
            n_down = nb
        else:
            u_in = second
            v_in = first
            up = path_b
            n_up = nb
            down = path
            n_down = na
        k = at + 1
        s = size[u_out]
        for t in range(k, n_up):
            size[up[t]] -= s
        for t in range(n_down):
            size[down[t]] += s
        for t in range(k - 1, 0, -1):
            size[up[t]] = s - size[up[t - 1]]
        size[u_in] = s
        state[e_in] = TREE
        state[pred[u_out]] = LOWER
        for t in range(k):
            _detach(up[t], parent, first_child, next_sib, prev_sib)
        for t in range(k - 1, 0, -1):
            below = up[t - 1]
            node = up[t]
            pred[node] = pred[below]
            pred_dir[node] = -pred_dir[below]
            _attach(node, below, parent, first_child, next_sib, prev_sib)
        pred[u_in] = e_in
        pred_dir[u_in] = UP if src[e_in] == u_in else DOWN
        _attach(u_in, v_in, parent, first_child, next_sib, prev_sib)
        if pred_dir[u_in] == UP:
            sigma = (pi[v_in] - cost[e_in]) - pi[u_in]
        else:
            sigma = (pi[v_in] + cost[e_in]) - pi[u_in]
        _shift_subtree(u_in, sigma, first_child, next_sib, pi, stack)
        pivots += 1
    return pivots, degenerate, e


@numba.njit(cache=True)
def _start_tree(n, perm, assign_arc, tree, arcs):
    """The starting basis (the module's docstring): every row below the root, column n + perm[i] below row i
    through its arc assign_arc[i] at flow 1."""
    parent, pred, pred_dir = tree.parent, tree.pred, tree.pred_dir
    first_child, next_sib, prev_sib = tree.first_child, tree.next_sib, tree.prev_sib
    state, flow = arcs.state, arcs.flow
    root = 2 * n
    for i in range(n):
        _attach(i, root, parent, first_child, next_sib, prev_sib)
        pred[i] = i  # root arc r → i
        pred_dir[i] = DOWN
        state[i] = TREE
        c = n + perm[i]
        _attach(c, i, parent, first_child, next_sib, prev_sib)
        pred[c] = assign_arc[i]
        pred_dir[c] = DOWN
        state[assign_arc[i]] = TREE
        flow[assign_arc[i]] = 1


def _arcs_of_assignment(rows: np.ndarray, cols: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """The index among the arcs (rows, cols) of each arc (i, perm[i]); ValueError if one is not among them."""
    n = perm.shape[0]
    key = rows * n + cols
    # arcs from a CSR (rows increasing, columns increasing within a row) need no sort
    order = np.arange(key.size) if np.all(key[1:] > key[:-1]) else np.argsort(key, kind="stable")
    want = np.arange(n, dtype=np.int64) * n + perm
    pos = np.searchsorted(key[order], want)
    if np.any(pos >= key.size) or np.any(key[order][np.minimum(pos, key.size - 1)] != want):
        raise ValueError("the starting assignment's arcs are not all among the arcs")
    return order[pos]


@dataclass
class SparseAssignment:
    """A basis of the assignment problem on the arcs added so far, and its potentials.

    Arcs 0..n−1 are the root's (never priced); candidate arcs follow, row ``src``,
    column ``tgt − n``. Build with :meth:`start`, grow with :meth:`add_arcs`, optimise
    with :meth:`solve`; :meth:`assignment` and :meth:`duals` read the result.
    """

    n: int
    m: int
    src: np.ndarray
    tgt: np.ndarray
    cost: np.ndarray
    flow: np.ndarray
    state: np.ndarray
    parent: np.ndarray
    pred: np.ndarray
    pred_dir: np.ndarray
    size: np.ndarray
    first_child: np.ndarray
    next_sib: np.ndarray
    prev_sib: np.ndarray
    pi: np.ndarray
    next_arc: int = 0
    pivots: int = 0
    degenerate: int = 0

    @classmethod
    def start(
        cls,
        rows: np.ndarray,
        cols: np.ndarray,
        costs: np.ndarray,
        perm: np.ndarray,
        root_cost: np.ndarray | None = None,
    ) -> SparseAssignment:
        """The basis of the assignment ``perm`` (its arcs must be among (rows, cols)) on these arcs.

        ``root_cost`` (n,) sets the starting row potentials π_i = root_cost[i] (u_i = −root_cost[i]);
        by default 0. Any values are valid: the root arcs never carry flow.
        """
        n = perm.shape[0]
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        assign_arc = n + _arcs_of_assignment(rows, cols, perm)
        S = cls._without_basis(n, rows, cols, costs, root_cost)
        _start_tree(n, np.asarray(perm, np.int64), assign_arc, S._tree(), S._arcs())
        S._refresh()
        return S

    @classmethod
    def _without_basis(cls, n, rows, cols, costs, root_cost) -> SparseAssignment:
        """The root's arcs and the candidate arcs (room for as many again to be added), every arc at flow 0,
        and empty tree arrays: ``_start_tree`` builds the basis."""
        m = n + rows.size
        cap = n + 2 * rows.size
        src = np.empty(cap, np.int64)
        tgt = np.empty(cap, np.int64)
        cost = np.empty(cap)
        src[:n], tgt[:n] = 2 * n, np.arange(n)
        cost[:n] = 0.0 if root_cost is None else root_cost
        src[n:m], tgt[n:m], cost[n:m] = rows, n + cols, costs
        nodes = 2 * n + 1
        return cls(
            n=n,
            m=m,
            src=src,
            tgt=tgt,
            cost=cost,
            flow=np.zeros(cap, np.int64),
            state=np.full(cap, LOWER, np.int8),
            parent=np.full(nodes, -1, np.int64),
            pred=np.full(nodes, -1, np.int64),
            pred_dir=np.zeros(nodes, np.int64),
            size=np.zeros(nodes, np.int64),
            first_child=np.full(nodes, -1, np.int64),
            next_sib=np.full(nodes, -1, np.int64),
            prev_sib=np.full(nodes, -1, np.int64),
            pi=np.zeros(nodes),
            next_arc=n,
        )

    def _arcs(self) -> Arcs:
        """The arc arrays as the kernels take them (built anew: ``add_arcs`` may replace the arrays)."""
        return Arcs(self.src, self.tgt, self.cost, self.flow, self.state)

    def _tree(self) -> Tree:
        """The tree arrays as the kernels take them."""
        return Tree(self.parent, self.pred, self.pred_dir, self.size, self.first_child, self.next_sib, self.prev_sib)

    def _refresh(self) -> None:
        nodes = 2 * self.n + 1
        _potentials_from_root(
            2 * self.n, self._tree(), self.cost, self.pi, np.empty(nodes, np.int64), np.empty(nodes, np.int64)
        )

    def add_arcs(self, rows: np.ndarray, cols: np.ndarray, costs: np.ndarray) -> None:
        """New non-basic arcs (flow 0); the basis stays feasible, so the next solve resumes from it."""
        k = rows.size
        if self.m + k > self.src.size:
            cap = max(2 * self.src.size, self.m + k)
            for name in ("src", "tgt", "cost", "flow", "state"):
                old = getattr(self, name)
                new = np.full(cap, LOWER, np.int8) if name == "state" else np.zeros(cap, old.dtype)
                new[: self.m] = old[: self.m]
                setattr(self, name, new)
        sl = slice(self.m, self.m + k)
        self.src[sl], self.tgt[sl], self.cost[sl] = rows, self.n + cols, costs
        self.flow[sl], self.state[sl] = 0, LOWER
        self.m += k

    @property
    def n_arcs(self) -> int:
        """Candidate arcs (the root's not counted)."""
        return self.m - self.n

    def solve(self, tol: float, block: int | None = None, max_pivots: int = 1 << 62) -> bool:
        """Pivot until every arc has reduced cost ≥ −tol; potentials are then recomputed from the root.

        ``tol`` should be at or above the rounding of the potentials (a few ulps of the largest): below it a
        reduced cost can be rounding alone, and degenerate pivots on such arcs may not end (the callers in
        ``assignment`` use ``_reduced_cost_tol``). Returns False if ``max_pivots`` ran out first."""
        if block is None:
            block = max(16, int(BLOCK_FACTOR * np.sqrt(self.n_arcs)))
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise ValueError(f"block must be an integer ≥ 1, got {block!r}")
        nodes = 2 * self.n + 1
        rule = PivotRule(
            n_root_arcs=self.n,
            m=self.m,
            tol=float(tol),
            block=int(block),
            max_pivots=int(max_pivots),
            sweep_after=int(min(SWEEP_BLOCKS * block, self.n_arcs + 1)),  # no search scans more than all arcs
        )
        buffers = PivotBuffers(
            path=np.empty(nodes, np.int64),
            path_b=np.empty(nodes, np.int64),
            stack=np.empty(nodes, np.int64),
            listed=np.empty(min(block, max(1, self.n_arcs)), np.int64),  # a list never holds more than the arcs
        )
        piv, deg, self.next_arc = _pivots(self._arcs(), self._tree(), self.pi, rule, buffers, self.next_arc)
        if piv < 0:
            raise RuntimeError("network simplex met a cycle of forward arcs (not a bipartite assignment graph)")
        self.pivots += piv
        self.degenerate += deg
        self._refresh()
        return piv < max_pivots

    def assignment(self) -> np.ndarray:
        """perm[i] = the column of row i (the arcs with flow 1)."""
        n = self.n
        e = np.flatnonzero(self.flow[n : self.m] > 0) + n
        perm = np.full(n, -1, np.int64)
        perm[self.src[e]] = self.tgt[e] - n
        return perm

    def duals(self) -> tuple[np.ndarray, np.ndarray]:
        """(u, v) with c_ij − u_i − v_j = the reduced cost of arc (i, j): u = −π(rows), v = π(columns)."""
        return -self.pi[: self.n].copy(), self.pi[self.n : 2 * self.n].copy()
