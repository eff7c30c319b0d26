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
- :mod:`repro.training.batch_schedule`: the run-time batch-size and learning-rate controller.
- :mod:`repro.training.sample_loop`: one sampler-driven epoch with per-sample loss/accuracy/confidence
  and pass counting.
- :mod:`repro.training.layertable`: a per-layer table of any torch model (shapes, parameters, FLOPs).
- :mod:`repro.training.memory`: the tensor-level memory accountant, swap (host or disk store) and
  recompute of blocks.
- :mod:`repro.training.ooc_sim`: the two-stream (compute and copy) simulator and the policy planners.
- :mod:`repro.training.calibrate`: the FLOP rate and alpha-beta constants measured on this machine, and the rank
  program that calibrates and times the parallel strategies in one launch.

Methods
-------
- :mod:`repro.training.hier_localsgd`: sharded hierarchical model averaging and the discrepancy metric.
- :mod:`repro.training.kakurenbo`: KAKURENBO's sample hiding (statistics, move-back, fraction schedule,
  learning-rate compensation, allreduce of the statistics).
- :mod:`repro.training.importance_sampling`: importance sampling with replacement (ISWR).
- :mod:`repro.training.selective_backprop`: Selective Backprop.
- :mod:`repro.training.overlap`: the overlap engine (per-tensor async allreduce from gradient hooks), its
  non-overlapped reference, VGG-A-mini and the timing rank program (with DDP).
- :mod:`repro.training.multires`: generated log-normal fields (CosmoFlow stand-in), the resolution pyramid,
  the fully convolutional regressor and the plateau-triggered switch.
- :mod:`repro.training.itersim`: the SimPy discrete-event model of one data-parallel iteration.
- :mod:`repro.training.sam`: SAM with per-layer masks and the layer-wise selection with a truncated second pass.
- :mod:`repro.training.sparse_ft`: sparse fine-tuning scores, per-layer budgets, the gradient-mask hook,
  LoRA (peft) and BitFit.
- :mod:`repro.training.oracle`: the analytic time and memory oracle per parallel strategy.
- :mod:`repro.training.model_parallel`: data, filter, channel and spatial parallelism of a sequential CNN on
  gloo ranks (the oracle's strategies run for real), with the timing and gradient rank programs.

Chapters: :mod:`repro.training.chapters`.
"""
