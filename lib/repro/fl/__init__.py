"""Federated learning: the core every federated chapter reuses.

- :mod:`repro.fl.task`: a federated task (data, partition, model) built from a spec.
- :mod:`repro.fl.client`: the Flower ``ClientApp`` (local SGD, per-client state).
- :mod:`repro.fl.strategies`: seeded FedAvg, the base of our Flower strategies.
- :mod:`repro.fl.fedlama`: FedLAMA, layer-wise adaptive aggregation intervals.
- :mod:`repro.fl.comm`: per-layer communication accounting.
- :mod:`repro.fl.engine`: the in-process engine and Flower's Ray simulation.
- :mod:`repro.fl.fedluar`: FedLUAR (layer-wise update recycling), its ablations and top-k sparsification.
- :mod:`repro.fl.activation`: client-activation policies (uniform, Power-of-Choice, multi-metric).
- :mod:`repro.fl.safa`: SAFA, FedDC-style daisy chaining and FedProx, with their penalised client.
- :mod:`repro.fl.robust`: the edge-case backdoor, defences (Multi-Krum, RFA, FLAME-lite, FedGrad) and detection rates.
- :mod:`repro.fl.kd`, :mod:`repro.fl.weighting`: distillation loss; aggregation-weight policies.
- :mod:`repro.fl.feddrl`: FedDRL's DDPG agent as an aggregation-weight policy.
- :mod:`repro.fl.cadis`: CADIS's last-layer clustering, cluster-equal aggregation and KD client.
- :mod:`repro.fl.skew_runs`: drivers and figures of the cluster-skew chapters (FedDRL, CADIS).
- :mod:`repro.fl.textdata`: the offline text task standing in for AG News.
- :mod:`repro.fl.runs`, :mod:`repro.fl.figures`: drivers and figures of these chapters.
"""
