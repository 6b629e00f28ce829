"""What each job of the pipeline costs: the arrays it holds at its peak (bytes) and its compute time (seconds),
from the experiment's config. ``lowtemp.config.resources`` turns them into requests (memory MB, wall time
minutes, CPUs); ``STAGE_COSTS`` names each stage's cost function (the stages: ``lowtemp.config.registry``).

The SLURM profile (``workflow/profiles/slurm``) sends every job with the
``mem_mb``, ``runtime`` and ``cpus_per_task`` that these functions compute from
the experiment's config (N tokens, dim d, R replicas, snapshots, horizon/dt,
betas, integrator, kernel), so a bigger sweep asks for more without anyone
editing numbers per experiment. ``workflow/rules/resources.smk`` is the only
caller in the workflow; it never hard-codes a size.

What is counted (8-byte floats; T + 1 = snapshots + 1 stored times):

* memory = ``resources.BASE_MB`` (the interpreter with numpy, scipy, xarray, numba and
  POT imported and the kernels compiled: 224–290 MB peak resident measured on
  the tiny config; matplotlib/seaborn add ~60 MB, hence ``resources.FIGURE_BASE_MB``) plus
  ``resources.MEMORY_MARGIN`` times the arrays the stage holds at its peak:

  - positions P = (T + 1)·R·N·d·8 bytes: ``finite_temperature`` holds the
    snapshot array, the dataset written from it and a checkpoint copy (3 P) and
    the ESS of every token at every snapshot; ``zero_temperature`` holds the
    integrated and the exact solution and their difference (5 P); readers load
    whole files (``netcdf.read_netcdf``), so ``distances_beta`` holds the finite
    file, the zero-temperature file (both solutions) and a transposed copy (4 P);
  - the integrator's working set: about 12 arrays of R·N·d (RK4 stages, sums,
    normalisation), plus the kernel's own: ``dense`` a coordinate-major copy,
    ``cap`` cell lists and a KD-tree (~10 arrays of R·N·d), ``numpy`` blocks of
    R·256·N scores;
  - the exact W2 (``w2_bytes``): the certified sparse network simplex holds O(N·k)
    (candidate arcs, the spanning tree, the coarse levels: ``W2_SPARSE_BYTES_PER_TOKEN``); its fallback,
    POT's network simplex, builds the N×N float64 cost matrix up to
    ``limits.DENSE_MAX`` tokens (peak measured at 5.13 × 8N² bytes above the
    process's baseline, N = 2048, 4096, 8192: 164 MB, 656 MB, 2.6 GB; budgeted as
    ``W2_BYTES_PER_PAIR``) and above it runs ``ot.emd2_lazy``, costs computed on the
    fly, O(N) memory. So the memory no longer caps N; the wall time does.

* wall time = ``resources.STARTUP_SECONDS`` (job start, imports, DAG of the job's own
  Snakemake, numba compiles at ~1.5 s per kernel and process) plus
  ``resources.RUNTIME_SAFETY`` times the compute:

  - finite temperature: field evaluations × R·N² token pairs × the kernel's cost
    per pair, with evaluations = 4 per RK4 step (1 per Euler step) + one per
    snapshot for the effective sample size. Costs per pair and evaluation
    with 2 threads, budgeted at the slowest 2-core machine they were measured on:
    ``dense`` 0.27 ns (β = 10) to 0.51 ns (β = 1000, exact row max) on the
    machine of the ``make bench`` table in docs/decisions/0009-numba-kernels.md, but 1.2 ns (β = 10)
    to 2.2–2.5 ns (β = 1000) on a later one (the pipeline's own β = 1000 runs,
    RK4 included: 2.4 ns), budgeted at 2.5 ns; ``cap`` 0.21–0.24 ns at β = 1000,
    N = 32768 on the first machine, 0.49 of the dense kernel's cost there (0.69 at
    N = 2048 on the second), budgeted at 1.3 ns (the automatic rule only picks it where a cap holds ≤ 3 %
    of a spread-out cloud; once tokens cluster a cap holds a whole cluster and
    it costs up to 4× more per pair, docs/kernels.md); ``numpy`` 2.4–8.3 ns,
    budgeted at 10 ns + 0.5 ns·d. The numba kernels split queries over threads:
    cost × 2 / threads (no parallel efficiency loss assumed; the safety factor
    covers it). Plus ``LINEAR_NS`` per token and evaluation (RK4 sums,
    renormalisation, sphere check).
  - zero temperature: ``ZERO_NS_PER_TOKEN_EVAL`` per token and field evaluation
    (64 ns measured) and ``EXACT_NS_PER_TOKEN_SNAPSHOT`` for the exact
    time-changed solution (2.6 µs measured).
  - distances: per replica and exact snapshot (``distances.exact_every``) one
    exact W2, ``w2_seconds(N)`` = 0.9 s·(N/4096)^1.6, the certified sparse
    network simplex (``lowtemp.transport.assignment.w2_exact``) on the pipeline's own clouds with
    another job on the two cores: 0.05–1.0 s at N = 4096 (concentration, β = 100,
    t = 0…20), 0.4–12 s at 16384, 9 s (t = 1) and 79 s (t = 5, the slowest kind:
    clusters forming) at 65536; the closed-form W2 to Π♯ρ0, the coupling bound and
    the eigenspace distances are linear in N.
  - particle error (``mean_field.particles`` of a mean-field experiment, one job per β): per particle number n one
    run costed as a finite-temperature run of n tokens (its kernel the rule's for n), R exact W2 of n tokens per
    exact snapshot and the coupling bound at every one; its memory is the reference's push-forward (read whole) and
    one run's arrays and W2 at a time. Measured on ``mean_field_circle`` (N = 1024, R = 4, horizon 16, n = 256,
    512, 1024, then on two threads): 23 CPU s at β = 10 against a budget of 30 s. The job now runs on one thread
    (the registry's): its time is the exact W2 solves, one after another.
  - fit and figures: small arrays; startup dominates. The animation of the tokens (``animation_cost``) reads every
    β's positions and holds its frames as images; it draws ``ANIMATION_SECONDS_PER_PANEL`` per panel and frame
    and ``ANIMATION_SECONDS_PER_POINT`` per token drawn.

  ``resources.RUNTIME_SAFETY`` = 3: the same dense step was measured 2–3.6× slower with
  another job on the same two cores than on a quiet machine, and a job that runs
  past its wall time is killed. Requests are rounded up to ``resources.RUNTIME_FLOOR_MIN``
  minutes at least.

* CPUs: ``finite_temperature`` uses the rule's threads (numba runs the kernels
  on that many threads; ``--set-threads finite_temperature=8`` raises both);
  every other stage is single-threaded (POT's simplex, numpy on small arrays),
  except ``convergence`` (the optional convergence studies, not in the default target), which
  runs the same kernels: field evaluations of its runs counted as above.

Retries (``attempt`` > 1, e.g. after an out-of-memory kill or a time-out) ask
for ``attempt`` times the memory and wall time.

Stages that are short (requested wall time at most ``resources.SHORT_JOB_MINUTES``) are
the ones the workflow groups into one SLURM job (``resources.group_of``): the per-β
distance jobs with their collection, and the fit with the figures.

Every ``*_cost`` function has the same signature, ``(experiment, *, beta, matrices, threads)`` → (peak bytes,
compute seconds); the registry (``lowtemp.config.registry``) names each stage's. The package never imports
snakemake; these are plain functions of the config.
"""

from __future__ import annotations

import numpy as np

from ..dynamics import fields, integrate, reduction, sphere_levels
from ..transport import limits
from . import studies
from .experiment import (
    ANIMATION_MAX_TOKENS,
    animation_frames,
    animation_size,
    exact_w2_snapshots,
    field_kernel,
    measure_of,
    time_grid,
)
from .plan import particle_error_tokens

#: peak bytes of one exact W2 per token pair (POT network simplex on an N×N float64 cost)
W2_BYTES_PER_PAIR = 5.5 * 8
#: the sparse exact W2 and the lazy network simplex, per token (bytes): about 40 candidate columns
#: (index and cost, 16 bytes each), the heap and the per-row certificate lists, with room to spare
W2_SPARSE_BYTES_PER_TOKEN = 4096
#: float64
_F = 8
#: seconds per token pair and field evaluation, with ``KERNEL_THREADS`` threads
NS_PER_PAIR = {"dense": 2.5, "cap": 1.3}
#: ``auto`` picks ``cap`` only where it predicts it cheaper than ``dense``: budget the dense cost
NS_PER_PAIR["auto"] = NS_PER_PAIR["dense"]
#: the numpy reference kernel: base plus per dimension (ns per pair)
NUMPY_NS_PER_PAIR = 10.0
NUMPY_NS_PER_PAIR_PER_DIM = 0.5
#: threads with which ``NS_PER_PAIR`` was measured
KERNEL_THREADS = 2
#: per token and field evaluation: RK4 sums, renormalisation, sphere check (ns)
LINEAR_NS = 50.0
#: zero-temperature field per token and evaluation (ns); exact solution per token and snapshot (ns)
ZERO_NS_PER_TOKEN_EVAL = 70.0
EXACT_NS_PER_TOKEN_SNAPSHOT = 3000.0
#: closed-form W2 to Π♯ρ0, coupling bound, eigenspace distances: per token and snapshot (ns)
DISTANCE_NS_PER_TOKEN_SNAPSHOT = 200.0
#: one exact W2 at N = 4096 (s) and the exponent of its growth with N (the slower snapshots)
W2_SECONDS_4096 = 0.9
W2_EXPONENT = 1.6


# ------------------------------------------------------------------ config helpers
def _sizes(experiment: dict):
    n = int(experiment["tokens"])
    d = int(experiment["dim"])
    r = int(experiment["replicas"])
    times = int(experiment["time"]["snapshots"]) + 1
    return n, d, r, times


def field_evaluations(experiment: dict) -> int:
    """Field evaluations of one simulation (``integrate.budgeted_evaluations``)."""
    return integrate.budgeted_evaluations(experiment["integrator"], time_grid(experiment))


def exact_w2_count(experiment: dict) -> int:
    """Snapshots with an exact N×N W2 per replica (``experiment.exact_w2_snapshots``)."""
    return int(exact_w2_snapshots(experiment, int(experiment["time"]["snapshots"]) + 1).sum())


def ns_per_pair(kernel: str, d: int) -> float:
    """Budgeted cost of one token pair and field evaluation with ``kernel`` in dimension d (ns, 2 threads).
    ``torch`` is budgeted as the numpy reference, what it costs on a CPU (docs/kernels.md): an upper
    bound where it runs on a GPU."""
    if kernel in ("numpy", "torch"):
        return NUMPY_NS_PER_PAIR + NUMPY_NS_PER_PAIR_PER_DIM * d
    return NS_PER_PAIR[kernel]


def w2_seconds(n_tokens: int) -> float:
    """Wall time of one exact W2 between two clouds of N tokens (``lowtemp.transport.assignment.w2_exact``), upper
    estimate."""
    return W2_SECONDS_4096 * (n_tokens / 4096.0) ** W2_EXPONENT


def w2_bytes(n_tokens: int) -> float:
    """Peak bytes of one exact W2 between two clouds of N tokens (``transport.w2``): O(N) above
    ``limits.DENSE_MAX`` tokens, where the fallback no longer builds the N×N matrix."""
    n = int(n_tokens)
    dense = W2_BYTES_PER_PAIR * n * n if n <= limits.DENSE_MAX else 0.0
    return dense + W2_SPARSE_BYTES_PER_TOKEN * n


#: CPU seconds of the mean-field reference per unit of time at cells of width 0.1 (both solves, the second at twice
#: the width): measured 1.7 (β = 10, 100) to 5.7 (β = 1000) on the circle to t = 15 on a 2-core AMD EPYC; twice the
#: largest, since cells accumulate after a departure. The cost grows like width⁻² (cells × cells per evaluation)
MEAN_FIELD_SECONDS_PER_TIME = 12.0


def _mean_field_geometry(experiment, matrices) -> str:
    return reduction.geometry(matrices.B, matrices.V, *measure_of(experiment))


def _mean_field(experiment):
    """The reference's two solves (time ∝ horizon · width⁻²) and the push-forward of every replica's tokens."""
    n, d, r, times = _sizes(experiment)
    width = float(experiment["mean_field"]["width"])
    horizon = float(experiment["time"]["horizon"])
    seconds = MEAN_FIELD_SECONDS_PER_TIME * horizon * (0.1 / width) ** 2 + 2 * times * r * n * LINEAR_NS * 1e-9
    return 6 * times * r * n * d * _F, seconds


#: the S² mesh reference (d = 3 without symmetry): field evaluations per unit of time (DOP853 at rtol 1e-4 with
#: stops every 0.25: 54 to 62 at β = 10 and 100, 85 at β = 31.6 in docs/sphere_results.md) and the cost per pair of a
#: query and a nominal kept quadrature node. On a uniform mesh a node costs about 20 ns on 2 threads
#: (docs/sphere_mean_field_bench.md); over a run the clusters' own weight prunes most of the tail (depth 20 is
#: relative to the largest contribution), and a run from level 3 at β = 10 to t = 7 took 328 s for 519 evaluations,
#: 4 ns per nominal node with the growth below: budgeted at 5
SPHERE_EVALUATIONS_PER_TIME = 90.0
SPHERE_NS_PER_NODE = 5.0
#: the mesh grows as the remeshing splits stretched triangles, fastest once the clusters move: started from level 3 at
#: β = 10 it held 1 + 1.1·t times its initial triangles (10 970 at t = 7), from level 4 at β = 100 1 + 0.18·t; budgeted
#: at 1 + SPHERE_GROWTH_RATE·t, its mean 1 + SPHERE_GROWTH_RATE·horizon/2 over the run (capped at max_triangles)
SPHERE_GROWTH_RATE = 1.2
#: the fewest quadrature nodes a query takes where the triangles are wider than the kernel: the pieces cover the
#: kernel's window at the sub-division tolerance, 2 574–3 116 nodes per query at variation 3 on levels 3 and 4 at
#: β = 1000 (docs/decisions/0023), (3/variation)² as many at another variation
SPHERE_WINDOW_NODES = 3000.0
#: bytes per triangle of one stored mesh (vertices, ℓ, triangles, log-masses) and of the solver's working copies
SPHERE_BYTES_PER_TRIANGLE = 96.0


def _sphere_mean_field(experiment, beta, matrices):
    """The S² reference's two solves (``sphere_levels.reference_levels``): per level, evaluations × queries (vertices
    and tracers) × kept quadrature nodes (7 per triangle, the share within the pruning depth of the kernel's
    centre, ``depth/κ`` of the sphere: 0.22–0.25 measured at β = 100, 0.024–0.028 at 1000; at least the kernel's
    window, ``SPHERE_WINDOW_NODES`` at the level's variation, on a level coarser than the kernel), the mesh at its
    mean size over the run; every snapshot's mesh is kept."""
    n, d, r, times = _sizes(experiment)
    block = experiment["mean_field"]
    horizon = float(experiment["time"]["horizon"])
    kappa = float(beta) * float(np.linalg.svd(matrices.B, compute_uv=False)[0])
    kept = min(1.0, sphere_levels.REFERENCE_DEPTH / kappa)
    seconds, data = 0.0, 6 * times * r * n * d * _F
    for level in sphere_levels.reference_levels(matrices.B, float(beta), block.get("level"), experiment["betas"]):
        growth = 1.0 + SPHERE_GROWTH_RATE * horizon / 2
        triangles = min(growth * sphere_levels.icosphere_triangles(level), float(block["max_triangles"]))
        queries = triangles / 2 + r * n
        evals = SPHERE_EVALUATIONS_PER_TIME * horizon
        variation = sphere_levels.reference_variation(level, matrices.B, float(beta))
        window = SPHERE_WINDOW_NODES * (sphere_levels.DEFAULT_VARIATION / variation) ** 2
        seconds += evals * queries * max(7 * triangles * kept, window) * SPHERE_NS_PER_NODE * 1e-9
        data += times * triangles * SPHERE_BYTES_PER_TRIANGLE
    return data, seconds


def finite_temperature_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The simulation at β (particles, or the mean-field reference of a ``model: mean_field`` experiment: without
    the matrices, the one-dimensional reduction's estimate)."""
    if beta is None:
        raise ValueError("finite_temperature: the estimate needs beta")
    if experiment["model"] == "mean_field":
        if matrices is not None and _mean_field_geometry(experiment, matrices) == "sphere":
            return _sphere_mean_field(experiment, beta, matrices)
        return _mean_field(experiment)
    return _particle_run(experiment, int(experiment["tokens"]), threads)


def _particle_run(experiment, n, threads):
    """One particle run of n tokens × R replicas on the experiment's grid with its integrator and the kernel its
    rule picks for n, and the ESS at every snapshot: (peak bytes, seconds)."""
    _, d, r, times = _sizes(experiment)
    kernel = field_kernel(experiment, n)
    tokens = r * n * d * _F
    positions = times * tokens
    ess = times * r * n * _F
    if kernel in ("numpy", "torch"):  # torch: the host copies; its blocks live on the device
        workspace = 4 * r * min(n, fields.DEFAULT_BLOCK_ROWS) * n * _F
    elif kernel in ("cap", "auto"):  # auto may run the cap kernel
        workspace = 10 * tokens
    else:
        workspace = 2 * tokens
    data = 3 * positions + 2 * ess + 12 * tokens + workspace
    evals = field_evaluations(experiment) + times  # + one (with ESS) per snapshot
    speedup = 1.0 if kernel in ("numpy", "torch") else max(1, int(threads)) / KERNEL_THREADS
    seconds = evals * r * n * n * ns_per_pair(kernel, d) * 1e-9 / speedup + evals * r * n * LINEAR_NS * 1e-9
    return data, seconds


def particle_error_beta_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The particle runs of one β measured against the mean-field reference (``mean_field.particles``): per particle
    number n a run as a finite-temperature run of n tokens, the exact W2 to the reference at the exact snapshots
    and the coupling bound at every one, one n at a time beside the reference's push-forward (read whole). Nothing
    without the block."""
    numbers = particle_error_tokens("experiment", experiment)
    if not numbers:
        return 0.0, 0.0
    n_max, d, r, times = _sizes(experiment)
    exact = exact_w2_count(experiment)
    reference = 2 * times * r * n_max * d * _F  # the finite-temperature file and the slice of it compared
    data, seconds = 0.0, 0.0
    for n in numbers:
        run_bytes, run_seconds = _particle_run(experiment, n, threads)
        data = max(data, run_bytes + (w2_bytes(n) if exact else 0.0))
        seconds += run_seconds + exact * r * w2_seconds(n) + times * r * n * DISTANCE_NS_PER_TOKEN_SNAPSHOT * 1e-9
    return reference + data, seconds


def particle_error_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The collection of every β's particle errors: about 5 curves of (beta, tokens, replica, time)."""
    numbers = particle_error_tokens("experiment", experiment)
    _, _, r, times = _sizes(experiment)
    return 5 * len(experiment["betas"]) * len(numbers) * r * times * _F, 1.0


def zero_temperature_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The zero-temperature run and its exact solution."""
    n, d, r, times = _sizes(experiment)
    tokens = r * n * d * _F
    data = 5 * times * tokens + 12 * tokens
    seconds = (
        field_evaluations(experiment) * r * n * ZERO_NS_PER_TOKEN_EVAL + times * r * n * EXACT_NS_PER_TOKEN_SNAPSHOT
    ) * 1e-9
    return data, seconds


def distances_beta_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The distances of one β: exact W2 at the configured snapshots, the closed forms at every one."""
    n, d, r, times = _sizes(experiment)
    positions = times * r * n * d * _F
    exact = exact_w2_count(experiment)
    data = 4 * positions + times * r * n * _F + (w2_bytes(n) if exact else 0)
    seconds = exact * r * w2_seconds(n) + times * r * n * DISTANCE_NS_PER_TOKEN_SNAPSHOT * 1e-9
    return data, seconds


def _curves(experiment):
    """Bytes of the collected distance curves (about 16 variables of (beta, replica, time))."""
    _, _, r, times = _sizes(experiment)
    return 16 * (len(experiment["betas"]) + 1) * r * times * _F


def distances_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The collection of every β's distances."""
    n, d, r, times = _sizes(experiment)
    positions = times * r * n * d * _F
    data = 3 * positions + _curves(experiment)
    seconds = times * r * n * DISTANCE_NS_PER_TOKEN_SNAPSHOT * 1e-9
    return data, seconds


def figure_cost(experiment, *, beta=None, matrices=None, threads=1):
    """One figure (every β's positions read for the snapshot figure, the worst case)."""
    n, d, r, times = _sizes(experiment)
    positions = times * r * n * d * _F
    betas = len(experiment["betas"])
    data = (betas + 2) * positions + betas * times * r * n * _F + _curves(experiment)
    seconds = 30.0 + (betas + 2) * times * r * n * 20e-9
    return data, seconds


#: seconds to draw and encode one panel of one frame of the animation, and per token drawn in it
ANIMATION_SECONDS_PER_PANEL = 0.02
ANIMATION_SECONDS_PER_POINT = 2e-6


def animation_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The animation of the tokens: every β's positions and zero temperature's two solutions read whole, the frames
    held as RGBA images until the GIF is written; drawing and encoding per frame, panel and token drawn."""
    n, d, r, times = _sizes(experiment)
    positions = times * r * n * d * _F
    betas = len(experiment["betas"])
    panels = betas + 1
    frames = animation_frames(times).size
    width, height = animation_size(panels)
    data = (betas + 2) * positions + 2 * betas * times * r * _F + frames * width * height * 4
    drawn = min(n, ANIMATION_MAX_TOKENS)
    seconds = 10.0 + frames * panels * (ANIMATION_SECONDS_PER_PANEL + drawn * ANIMATION_SECONDS_PER_POINT)
    return data, seconds


def convergence_cost(experiment, *, beta=None, matrices=None, threads=1):
    """Both convergence studies: step halving at h, h/2, h/4 (and the tolerance levels), then the particle-number
    runs at each of its β."""
    s = studies.study_settings("experiment", experiment)
    d = int(experiment["dim"])
    interval = s.interval
    exact_w2 = matrices is None or matrices.E1.shape[1] > 1  # else the closed form against ±u
    w2_cost = (lambda n: w2_seconds(n)) if exact_w2 else (lambda n: n * DISTANCE_NS_PER_TOKEN_SNAPSHOT * 1e-9)
    # step halving: runs up to the last check time at h, h/2, h/4 (1 + 2 + 4 times the steps at h); an
    # adaptive integrator at three tolerances that halve its steps: 1 + 2 + 4 times its budget at the first
    st = s.steps
    grids = studies.halving_grids(max(st.times), interval, st.dt)
    methods = s.methods
    evals = sum(integrate.budgeted_evaluations(m, g) for m in studies.NOMINAL_ORDER for g in grids)
    evals += sum(
        (2**studies.STEP_LEVELS - 1) * integrate.budgeted_evaluations(m, grids[0])
        for m in methods
        if m in integrate.ADAPTIVE
    )
    kernel = s.kernel(st.tokens)
    speedup = 1.0 if kernel == "numpy" else max(1, int(threads)) / KERNEL_THREADS
    r, n = st.replicas, st.tokens
    checks = len(st.times)
    seconds = (
        evals * r * n * n * ns_per_pair(kernel, d) * 1e-9 / speedup
        + evals * r * n * (LINEAR_NS + ZERO_NS_PER_TOKEN_EVAL) * 1e-9
        + checks * r * n * EXACT_NS_PER_TOKEN_SNAPSHOT * 1e-9
        + len(methods) * studies.STEP_LEVELS * checks * r * w2_cost(n)
    )
    snapshots = round(max(st.times) / interval) + 1
    step_bytes = (snapshots + 12 + 2 * len(methods) * studies.STEP_LEVELS * checks) * r * n * d * _F
    # particle number: one run per N on the experiment's step, W2 at every snapshot
    pa = s.particles
    grid = s.grid
    snapshots = grid.snapshots
    evals = integrate.budgeted_evaluations(s.integrator, grid)
    for beta_study in pa.betas:  # the same runs at every β of the particle study
        reused = s.tokens if beta_study in s.reused else None
        for n in pa.tokens:
            seconds += (snapshots + 1) * pa.replicas * w2_cost(n)
            if n == reused:  # the experiment's own run stands in for this N: read, not simulated
                continue
            kernel = s.kernel(n)
            speedup = 1.0 if kernel == "numpy" else max(1, int(threads)) / KERNEL_THREADS
            # evaluations of the run, and one per snapshot for the effective sample size
            seconds += (evals + snapshots + 1) * pa.replicas * n * n * ns_per_pair(
                kernel, d
            ) * 1e-9 / speedup + evals * pa.replicas * n * LINEAR_NS * 1e-9
    n = max(pa.tokens)
    particle_bytes = (snapshots + 1 + 12) * pa.replicas * n * d * _F + (w2_bytes(n) if exact_w2 else 0)
    return max(step_bytes, particle_bytes), seconds


def matrices_cost(experiment, *, beta=None, matrices=None, threads=1):
    """K, Q, V: nothing to speak of."""
    return 0.0, 1.0


def initial_tokens_cost(experiment, *, beta=None, matrices=None, threads=1):
    """Sampling R·N tokens and their Assumption 2 moment."""
    n, d, r, _ = _sizes(experiment)
    return 4.0 * r * n * d * _F, r * n * 1e-6


def fit_cost(experiment, *, beta=None, matrices=None, threads=1):
    """The fit (and the claims, which read the same curves): the collected curves, seconds of arithmetic."""
    return _curves(experiment), 10.0


#: what one job of each stage of ``registry.STAGES`` costs: (experiment, *, beta, matrices, threads) -> (peak bytes,
#: compute seconds)
STAGE_COSTS = {
    "matrices": matrices_cost,
    "initial_tokens": initial_tokens_cost,
    "finite_temperature": finite_temperature_cost,
    "zero_temperature": zero_temperature_cost,
    "distances_beta": distances_beta_cost,
    "distances": distances_cost,
    "particle_error_beta": particle_error_beta_cost,
    "particle_error": particle_error_cost,
    "fit": fit_cost,
    "claims": fit_cost,
    "figure": figure_cost,
    "convergence": convergence_cost,
    "animation": animation_cost,
    "convergence_figure": figure_cost,
}
