"""Efficient and distributed training: the core every training-systems chapter reuses.

Core
- :mod:`repro.training.launcher`: k local ``torch.distributed`` gloo ranks, group sub-communicators,
  timeouts and failure reports.
- :mod:`repro.training.simulator`: the single-process simulator of grouped data-parallel / local SGD
  (G replicas x S workers, per-worker batch norm).
- :mod:`repro.training.distributed`: the same maths on real gloo ranks, with a real sample exchange.
- :mod:`repro.training.data`: the indexed dataset wrapper and generated classification sets.
- :mod:`repro.training.shuffling`: global, local and partial-local shuffling with exchange accounting.
- :mod:`repro.training.cost`: the alpha-beta cost model of ring collectives.

Methods
- :mod:`repro.training.hier_localsgd`: sharded hierarchical model averaging and the discrepancy metric.
- :mod:`repro.training.kakurenbo`: the sample-hiding sampler and its baselines (importance sampling,
  Selective Backprop).

Chapters: :mod:`repro.training.chapters`.
"""
