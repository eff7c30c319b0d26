"""Federated learning: the core every federated chapter reuses.

- :mod:`repro.fl.task`: a federated task (data, partition, model) built from a spec.
- :mod:`repro.fl.client`: the Flower ``ClientApp`` (local SGD, per-client state).
- :mod:`repro.fl.strategies`: seeded FedAvg, the base of our Flower strategies.
- :mod:`repro.fl.fedlama`: FedLAMA, layer-wise adaptive aggregation intervals.
- :mod:`repro.fl.comm`: per-layer communication accounting.
- :mod:`repro.fl.engine`: the in-process engine and Flower's Ray simulation.
"""
