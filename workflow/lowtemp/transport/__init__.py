"""Layer 3, transport: exact W2 between point clouds and the closed forms against projections.

``w2``: W2 itself (``w2``, ``w2_certified``; ``network_simplex`` for weighted measures and unequal sizes;
``w2_to_projection`` and its (replica, time) curves ``w2_to_projection_curves``, ``w2_two_atoms``;
``TransportNotConverged`` when a solve is not certified). Two
equal-size uniform clouds go to the exact assignment solver with a certificate: ``assignment`` drives it
(``w2_exact``, ``W2Result``: candidates, simplex, pricing rounds, local re-solves, POT's fallback);
``pricing`` prices all N² pairs with the rigorous bound (``certify``, ``Certificate``); ``duals`` gives the
shortest-path potentials of the local re-solve; ``neighbours`` the candidate pairs (``candidate_neighbours``,
``lifted_neighbours``, ``rank_pairs``); ``guide`` the multiscale guide of matched balanced cells
(``balanced_cells``); ``simplex`` the sparse network simplex it runs (``SparseAssignment``). ``limits`` holds
the solver's size constants without loading numba.

Imports: model.
"""
