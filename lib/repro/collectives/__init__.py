"""Collective-communication algorithms: one schedule, several executors.

Each algorithm is written once as a :class:`~repro.collectives.ir.Schedule`
(per rank, per step: sends, receives with copy/sum, local copies, over a
buffer cut into blocks of uneven lengths) and is then

* interpreted in pure numpy for all ranks (:func:`execute_reference`),
* run on a real MPI with mpi4py (:func:`~repro.collectives.executors.mpi.execute_mpi`, launched by
  :func:`~repro.collectives.executors.launcher.run_mpi` and the worker
  :mod:`repro.collectives.executors.mpi_worker`),
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
