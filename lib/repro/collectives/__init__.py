"""Collective communication and networks: one schedule, several executors, six chapters.

Each algorithm is written once as a :class:`~repro.hpc.ir.Schedule`
(per rank, per step: sends, receives with copy/sum, local copies, over a
buffer cut into blocks of uneven lengths) and is then run, costed or
simulated by the modules below and by the shared executors of :mod:`repro.hpc`
(the IR, the platforms, the reference, MPI and SimGrid executors and the MPI
launcher live there, since pario and misc use them too).  Nothing is
re-exported here: import from the module that defines a name.

Schedules and algorithms
    ``phases``        building blocks (ring, halving/doubling phases) the algorithms compose
    ``allreduce``     ``ring``, ``recursive_doubling``, ``rabenseifner``, ``binomial``, ``lr_lr``,
                      ``lr_rab``, ``lr_lr_pipe``
    ``alltoall``      ``linear``, ``pairwise``, ``bruck``, ``two_phase``, ``2dfc``
    ``algorithms``    the registry (``ALGORITHMS``, ``build_schedule``, ``closed_form_cost``,
                      ``parse_spec``, ``inapplicable``)
    ``kautz_mp``      multi-port allgather / reduce-scatter / allreduce on a Kautz ``K(d, 2)``
    ``sparse``        mixed dense/sparse segments and the sparse allreduce algorithms
    ``fec``           Reed-Solomon RS(544,514) and Hamming SEC/SECDED codecs and their error models
    ``npb_skeletons`` communication skeletons of NPB-like kernels

Costs and networks
    ``cost``          alpha-beta-gamma closed forms and a schedule's cost; two-level and
                      halving-doubling closed forms with the platforms' constants
    ``congestion``    route-aware alpha-beta cost with link sharing, link energy, ``contention_of``

MPI
    ``mpi_worker``    the per-rank check/bench/kautz/sparse program and ``launch_worker`` (through
                      :func:`repro.hpc.launcher.run_mpi`)

Shared by the chapters
    ``sweep``         ``Point``, ``platform_key``, ``build_platform``, ``closed_form``, ``run_points``
    ``exactness``     ``algorithm_exactness`` and ``exactness_summary`` (schedules against MPI's collectives)
    ``figures``       ``sim_vs_model``, ``bars``, ``comparison_table``

Chapters (``chapters/<module>.py`` beside ``chapters/<id>.yaml``)
    ``multileader_allreduce``, ``a2a_2dfc``, ``dln_allreduce``, ``kautz_fpga``, ``hamming_fec``,
    ``sparse_allreduce``
"""
