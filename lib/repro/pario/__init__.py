"""Parallel I/O: collective MPI-IO, ROMIO-style two-phase writes and their exchange kernels.

Core modules
------------
:mod:`repro.pario.decomp`
    Decompositions of one file over ``p`` ranks as per-rank ``(offset, length)``
    request lists: block, block-cyclic, E3SM-like irregular runs, 2-D
    block-cyclic subarrays; the byte pattern every test writes.
:mod:`repro.pario.mpiio`
    MPI's own collective ``Write_at_all`` / ``Read_at_all`` with hindexed file
    views (mpi4py over the venv's MPICH, ROMIO underneath): the baseline.
:mod:`repro.pario.twophase`
    ROMIO's file domains (optionally stripe-aligned), aggregator placement,
    request splitting and the exchange plan (MPI-free).
:mod:`repro.pario.kernels`
    All-to-many exchange kernels (unordered, pairwise, scattered(W),
    balanced spread-out(W)) as round tables and as schedules of the shared
    IR (:mod:`repro.hpc.ir`), and a per-round endpoint cost model with
    an MPI queue-search term.
:mod:`repro.pario.mpi_twophase`
    Our two-phase write on MPI: plan, exchange by the shared mpi4py executor,
    aggregator writes.
:mod:`repro.pario.mpi_worker`
    The per-rank program that writes a decomposition with MPI and with every
    kernel and compares the files; ``launch`` runs it through the shared
    launcher (:mod:`repro.hpc.launcher`).
:mod:`repro.pario.exchange_sim`
    Paper-scale exchange times: SimGrid (shared executor) on a Dragonfly and
    the endpoint model swept over its constants.
:mod:`repro.pario.intranode`, :mod:`repro.pario.mpi_tam`, :mod:`repro.pario.tam_model`
    Intra-node aggregation (TAM): rank-to-node map, k aggregators per node,
    k-way heap merge and coalescing; the two-layer write and read on MPI; its
    cost at scale (endpoint model, SimGrid).
:mod:`repro.pario.chunked`, :mod:`repro.pario.mpi_chunked`, :mod:`repro.pario.hdf5_ref`
    PnetCDF-style chunked, compressed variables: chunk grid, owners by a
    user-defined MPI reduction, filters, metadata table, independent reader;
    the collective write per request or aggregated; HDF5's gzip chunks as the
    reference.
:mod:`repro.pario.figures`
    Figures two chapters draw (a speedup against the queue-search cost ``o1``).
:mod:`repro.pario.async_io`, :mod:`repro.pario.ddp_train`
    Sharded HDF5 training data, synchronous and double-buffered bulk loaders
    behind emulated storage, and ``torch.distributed`` (gloo) training with each.

Chapters (``repro.pario.chapters``): ``tpio-spreadout``, ``tpio-intranode``,
``pnetcdf-compress``, ``async-io``.  MPI jobs run through the shared launcher
(:mod:`repro.hpc.launcher`) with a timeout; the worker of
every MPI-IO job is :mod:`repro.pario.mpi_worker`.
"""
