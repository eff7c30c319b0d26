"""Executors: the programs that run a :class:`~repro.collectives.ir.Schedule`.

``reference``
    Pure numpy, all ranks in one process; the oracle the others must agree
    with (:func:`~repro.collectives.executors.reference.execute_reference`).
``mpi``
    One rank of a real MPI communicator through mpi4py
    (:func:`~repro.collectives.executors.mpi.execute_mpi`).
``simgrid``
    Simulated time on a :class:`~repro.collectives.platforms.Platform`
    (:func:`~repro.collectives.executors.simgrid.simulate`, in a child process).
``launcher``
    ``mpiexec -n P python -m mpi4py ...`` with a hard timeout and an error that
    carries the failing rank's cause (:func:`~repro.collectives.executors.launcher.run_mpi`).
``mpi_worker``
    The per-rank program that checks or times schedules against MPI's own
    collectives, and :func:`~repro.collectives.executors.mpi_worker.launch_worker`,
    which runs it and returns rank 0's report.
"""
