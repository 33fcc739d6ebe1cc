"""The multi-partition room (spec/multi-partition.md): which pending job goes to which partition.

The allocator, one concept per module (import from these modules directly; there is
no facade module and this package re-exports nothing):

- ``model``: the data (``Partition``, ``PartitionInstance``; of one round
  ``JobTable``, ``RunningJob``, ``AllocationProblem``), the result (``Allocation``),
  ``Objective`` and the priority order.
- ``timeline``: free GPUs per node over time, layer 2's state.
- ``layer2``: the exact plan of one partition, and the objective of an assignment.
- ``exact``: EVO's exact fitness, cached and incremental layer 2.
- ``surrogate``: EVO's fast approximate fitness of a whole population.
- ``mct``: minimum completion time (``allocate_mct``).
- ``evo``: the evolutionary search (``EvoConfig``, ``allocate_evo``) and its operators.
- ``local_search``: exact single-job moves after the search.
- ``snapshot``: allocation problems from a multi-partition instance.
- ``instances``: the spec's seeded synthetic multi-partition instance.

Around it: ``learner`` (genetic programming of the priority function), ``moves``
(the allocator applied to pending Slurm jobs) and ``priority_file``.
"""
