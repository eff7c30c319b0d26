"""Other papers: one module per method, until a second chapter needs a shared core.

* :mod:`repro.misc.kmeans` -- Lloyd K-means with numba kernels in AoS, SoA and
  blocked (AoSoA) layouts, zero padding, privatised serial/parallel centroid
  reductions, a scikit-learn reference step, an mpi4py Allreduce step and a
  strong-scaling model of it (chapter ``kmeans-phi``).
* :mod:`repro.misc.realtime` -- component/activity models turned into networkx
  precedence DAGs, chain-cover thread synthesis (Dilworth), the Graham bound
  and a simpy multiprocessor scheduler simulation (chapter ``component-embedded``).
* :mod:`repro.misc.iptf` -- a synthetic sky-survey workload (fields, densities,
  batches of CCD images, a machine-load process), spatial and temporal history
  features with no look-ahead, the within-batch error boundary and a pgmpy
  Bayesian-network regressor (chapter ``iptf-bayes``).

Chapter drivers live in :mod:`repro.misc.chapters`.
"""
