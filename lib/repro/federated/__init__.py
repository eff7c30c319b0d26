"""Federated learning: the family's core, its algorithms and its chapters (a map; nothing is re-exported).

Core, used by every chapter:

- :mod:`repro.federated.task`: a federated task (data, partition, model) built from a frozen spec;
  the planted clusters of a cluster-skewed split.
- :mod:`repro.federated.client`: local training (:class:`~repro.federated.client.LocalSGD`,
  ``local_sgd``, ``penalised_sgd``), the client-round prologue and epilogue every train handler
  shares, and the shared Flower ``ClientApp``.
- :mod:`repro.federated.strategies`: seeded FedAvg and FedProx, the base of the book's Flower strategies.
- :mod:`repro.federated.engine`: the in-process engine and Flower's Ray simulation (any Flower
  strategy runs on both), the initial model, central evaluation and the run summary.
- :mod:`repro.federated.deployment`: runs on Flower's deployment engine (a local SuperLink and
  SuperNodes as separate processes, or an existing SuperLink across machines).
- :mod:`repro.federated.tiers`: client capability tiers and the memory model of one local step.
- :mod:`repro.federated.split`: the split-learning cut layer (activations up, gradients down, bytes counted).
- :mod:`repro.federated.comm`: per-layer communication accounting.
- :mod:`repro.federated.reference`: a hand-written FedAvg loop, the yardstick of the Flower path.
- :mod:`repro.federated.features`, :mod:`repro.federated.kd`, :mod:`repro.federated.weighting`:
  last-layer client features; the distillation loss; aggregation-weight policies.
- :mod:`repro.federated.textdata`: the offline text task standing in for AG News.
- :mod:`repro.federated.figures`: figure and table helpers shared by two or more chapters.
- :mod:`repro.federated.runs`: the run record every chapter's comparison subclasses (shared fields, the
  simulation with the usual initial model and evaluation), running many, and the final table and curves.
- :mod:`repro.federated.tuning`: fair tuning of baselines (a same-size grid per tuned method, the best
  mean over seeds on a validation metric kept) and the held-out validation set of a split.

Algorithms, one module each:

- :mod:`repro.federated.fedlama`: FedLAMA, layer-wise adaptive aggregation intervals.
- :mod:`repro.federated.fedluar`: FedLUAR (layer-wise update recycling), its ablations and top-k sparsification.
- :mod:`repro.federated.activation`: client-activation policies (uniform, Power-of-Choice, multi-metric).
- :mod:`repro.federated.safa`: SAFA (fixed or adaptive period) and FedDC-style daisy chaining.
- :mod:`repro.federated.regularised`: the regularised client (EWC or proximal penalty) of SAFA, FedProx and FedDRL;
  the label pattern of a client's last-layer gradient.
- :mod:`repro.federated.feddyn`, :mod:`repro.federated.scaffold`: FedDyn and SCAFFOLD.
- :mod:`repro.federated.robust`: the edge-case backdoor and the defences (Multi-Krum, RFA, FLAME, FedGrad).
- :mod:`repro.federated.feddrl`: FedDRL's DDPG agent as an aggregation-weight policy.
- :mod:`repro.federated.cadis`: CADIS's last-layer clustering, cluster-equal aggregation and KD client.
- :mod:`repro.federated.partial`: partial-model training masks and layer-wise aggregation (EmbracingFL).
- :mod:`repro.federated.heterofl`, :mod:`repro.federated.fjord`: HeteroFL's nested width slices and
  FjORD's ordered dropout.
- :mod:`repro.federated.hierfavg`: HierFAVG, client-edge-cloud aggregation composed from Flower's FedAvg.
- :mod:`repro.federated.sfetec`: SFETEC's split training over edges, SplitFed, and their cost model.
- :mod:`repro.federated.feddct`: FedDCT's divide-and-co-train ensemble and its cluster strategy on Flower.
- :mod:`repro.federated.fedgkt`: FedGKT's group knowledge transfer (per-client extractor and head, a server
  model trained on their features, distillation both ways) as a Flower strategy and client.
- :mod:`repro.federated.feddf`: labelled/unlabelled splits and server-side distillation (FedDF).
- :mod:`repro.federated.ondevice_kd`: on-device KD's two-model rounds (auxiliary and large model, one
  Flower strategy), with its baselines as recipes.
- :mod:`repro.federated.personal`: seen/unseen clients with the label-access guard and the EM label prior;
  :mod:`repro.federated.feature_shift`: group-wise image transforms (feature shift between clients).
- :mod:`repro.federated.hypernetwork`: personal heads generated from a label-free client descriptor.
- :mod:`repro.federated.fedrep`: FedRep, a shared body and personal heads.
- :mod:`repro.federated.audio`, :mod:`repro.federated.label_noise`: synthetic keyword audio, log-mel
  features, noise at a target SNR, and per-client label noise; :mod:`repro.federated.keywords`: the
  federated keyword-spotting task built from them (speakers as clients, a log-mel CNN).
- :mod:`repro.federated.fedopt`: Flower's FedAdam, FedYogi, FedAdagrad and FedAvgM with seeded sampling.

Chapters (:mod:`repro.federated.chapters`), each a driver ``<module>.py`` beside its registry
file ``<id>.yaml``: ``fedlama``, ``fedluar``, ``biased_activation``, ``safa``, ``fedgrad``,
``feddrl``, ``cluster_skew_kd``, ``embracingfl``, ``sfetec``, ``feddct``, ``ondevice_kd``,
``fedaudio``, ``pfl_unseen``.
"""
