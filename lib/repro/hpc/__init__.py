"""HPC pieces shared by the collectives, pario and misc families: the schedule IR, networks, executors.

Nothing is re-exported here: import from the module that defines a name.

Schedules and networks
    ``ir``            the schedule IR (per rank, per step: sends, receives with copy/sum, local copies;
                      ``validate``, ``messages``, ``link_bytes``)
    ``platforms``     SimGrid platforms (fully connected, 2dfc, Kautz, fat tree, GPU cluster,
                      distributed loop, zones)
    ``dragonfly``     the Dragonfly and the end-point start-up overhead

Executors of a :class:`~repro.hpc.ir.Schedule`
    ``reference``     numpy, all ranks in one process (the oracle the others must agree with)
    ``mpi``           one rank of a real MPI communicator through mpi4py (``execute_mpi``)
    ``simgrid``       simulated time on a platform, in a child process (``simulate``)

Launching MPI
    ``launcher``      ``run_mpi``: ``mpiexec -n P python -m mpi4py ...`` with a hard timeout, an error
                      that carries the failing rank's cause, and no process left behind
"""
