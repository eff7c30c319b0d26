"""Collective-communication algorithms: one schedule, several executors.

Each algorithm is written once as a :class:`~repro.collectives.ir.Schedule`
(per rank, per step: sends, receives with copy/sum, local copies, over a
buffer cut into blocks of uneven lengths) and is then

* interpreted in pure numpy for all ranks (:func:`execute_reference`),
* run on a real MPI with mpi4py (:func:`execute_mpi`, launched by
  :func:`run_mpi` and the worker ``python -m repro.collectives.mpi_worker``),
* costed under the alpha-beta-gamma model (:func:`schedule_cost`), next to
  each algorithm's closed form (:func:`closed_form_cost`),
* simulated on a network with SimGrid (:func:`simulate`, platforms from
  :mod:`repro.collectives.platforms`; needs ``envs/simgrid-setup.sh``),
* costed on a platform's routes with link sharing
  (:func:`repro.collectives.congestion.congestion_cost`).

The chapters' sweeps, closed forms and claims live in
:mod:`repro.collectives.experiments`, their figures in :mod:`repro.collectives.plots`.

Algorithms (``ALGORITHMS``): allreduce ``ring``, ``recursive_doubling``,
``rabenseifner``, ``binomial``, ``lr_lr``, ``lr_rab``, ``lr_lr_pipe``;
all-to-all ``linear``, ``pairwise``, ``bruck``, ``two_phase``, ``2dfc``.
"""

from repro.collectives.algorithms import (
    ALGORITHMS,
    ALLREDUCE_ALGORITHMS,
    ALLTOALL_ALGORITHMS,
    Algorithm,
    build_schedule,
    closed_form_cost,
    default_node_size,
    get_algorithm,
    parameter_grid,
    parse_spec,
)
from repro.collectives.alltoall import grid_shape
from repro.collectives.cost import schedule_cost
from repro.collectives.ir import (
    Copy,
    Message,
    Recv,
    Schedule,
    Send,
    Step,
    link_bytes,
    messages,
    split_lengths,
    total_link_bytes,
    validate,
)
from repro.collectives.launcher import MPIRunError, find_mpiexec, run_mpi
from repro.collectives.mpi_exec import execute_mpi
from repro.collectives.platforms import (Platform, distributed_loop, fat_tree, fully_connected, gpu_cluster, kautz,
                                        two_dim_fc)
from repro.collectives.reference import execute_reference, expected_output
from repro.collectives.simgrid_exec import SimResult, simgrid_available, simulate

__all__ = [
    "ALGORITHMS", "ALLREDUCE_ALGORITHMS", "ALLTOALL_ALGORITHMS", "Algorithm", "Copy", "MPIRunError",
    "Message", "Recv", "Schedule", "Send", "Step", "build_schedule", "closed_form_cost",
    "default_node_size", "execute_mpi", "execute_reference", "expected_output", "find_mpiexec",
    "get_algorithm", "grid_shape", "parameter_grid", "link_bytes", "messages", "parse_spec", "run_mpi",
    "schedule_cost", "split_lengths", "total_link_bytes", "validate",
    "Platform", "SimResult", "distributed_loop", "fat_tree", "fully_connected", "gpu_cluster", "kautz",
    "simgrid_available", "simulate", "two_dim_fc",
]
