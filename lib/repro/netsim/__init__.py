"""Vehicular and sensor networks: simulators, agents and baselines.

Core modules, used by every chapter of the family:

- :mod:`repro.netsim.mobility`   the road-grid city (bus routes, random-waypoint taxis), RSU placement,
  KD-tree coverage and neighbour queries, and the 1-D road with Poisson vehicle arrivals.
- :mod:`repro.netsim.queues`     FIFO links and servers with deterministic finish times.
- :mod:`repro.netsim.oppcomm`    ``OppComm-v0``: opportunistic communication of bus-mounted sensors
  (wait / 4G / RSU / relay), multi-agent with action masks.
- :mod:`repro.netsim.v2x`        ``ThreeTierV2X-v0``: per-task offloading over V2I, V2C and V2I+I2C paths.
- :mod:`repro.netsim.wrsn`       ``WRSNCharging-v0``: a mobile charger in a wireless rechargeable sensor network
  (event-driven energy integration, routing tree, coverage and connectivity, a charger that never overspends).
- :mod:`repro.netsim.qcharging`  the authors' Q-charging (online, three-term reward) and INMA on ``WRSNCharging-v0``.
- :mod:`repro.netsim.crowdsensing` spatio-temporal coverage, cost and balance of sensing-frequency plans.
- :mod:`repro.netsim.genetic`    an integer GA on ``deap``.
- :mod:`repro.netsim.fuzzy`      the fuzzy reward-weight controller on scikit-fuzzy.
- :mod:`repro.netsim.heuristics` the non-learning baselines of both simulators, on the same environments.
- :mod:`repro.netsim.qlearning`  tabular Q-learning (one table per agent or one shared table).
- :mod:`repro.netsim.oppcomm_agents` training and evaluating agents on ``OppComm-v0`` (qlearn-offload,
  fuzzy-qlearn).
- :mod:`repro.netsim.dqn`        DQN from stable-baselines3, with queue-guided exploration.
- :mod:`repro.netsim.figures`    figure helpers shared by two or more chapters.

Chapter drivers live in :mod:`repro.netsim.chapters`.
"""
