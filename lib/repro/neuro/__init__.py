"""Neuromorphic simulation: a spiking network mapped onto crossbar cores of a chip with a mesh network-on-chip.

* :mod:`repro.neuro.convert` -- ANN-to-SNN conversion of a ReLU MLP: data-based
  weight normalisation, integer synaptic weights, integrate-and-fire neurons
  with subtractive reset.
* :mod:`repro.neuro.mapping` -- tiling of layers onto crossbar-sized cores,
  placement on a 2D mesh, XY routing, packet, hop and link-load counts, and a
  first-order network-on-chip delay from those counters.
* :mod:`repro.neuro.core` -- the core phase: RRAM conductance quantisation,
  lognormal device variation, the column ADC and the membrane update.
* :mod:`repro.neuro.simulate` -- the tick loop: a monolithic torch reference
  and the core-partitioned simulation over worker processes (core phase in
  the workers, network-on-chip phase in the coordinator).
* :mod:`repro.neuro.synthetic` -- random integer-weight networks and Bernoulli
  inputs for the simulator's scaling study.

Chapter drivers live in :mod:`repro.neuro.chapters`.
"""
