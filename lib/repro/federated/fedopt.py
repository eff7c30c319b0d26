"""FedOpt server optimisers (Reddi et al., 2021) from Flower, with the book's seeded sampling.

The server treats the clients' weighted mean change as a pseudo-gradient
and steps with Adam, Yogi or Adagrad.  The update rules are Flower's own
``flwr.serverapp.strategy`` classes (:class:`~flwr.serverapp.strategy.FedAdam`,
:class:`~flwr.serverapp.strategy.FedYogi`, :class:`~flwr.serverapp.strategy.FedAdagrad`,
and :class:`~flwr.serverapp.strategy.FedAvgM` for server SGD with momentum);
this module only composes them with :class:`~repro.federated.strategies.SeededFedAvg`,
whose seeded sampling over partition ids and communication ledger every
chapter relies on.  Aggregation is untouched: with every client active a
seeded optimiser ends bit for bit where Flower's stock one does (tested).
"""

from __future__ import annotations

from typing import Any, Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvgM, FedYogi

from repro.federated.arrays import from_array
from repro.federated.strategies import SeededFedAvg


class SeededServerOptimiser(SeededFedAvg):
    """Seeded sampling in front of one of Flower's server-optimiser strategies (a mixin).

    :class:`SeededFedAvg` builds the round's messages itself, so the step
    Flower's optimisers take in ``configure_train`` (remembering the model
    the round starts from) is taken here before sampling.
    """

    current_arrays: Any
    """The round's starting model (Flower's optimisers read it in ``aggregate_train``)."""
    eta_l: float
    """The clients' learning rate (informational in Flower)."""

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Remember the round's starting model (the optimiser's ``x_t``), then sample as :class:`SeededFedAvg`."""
        if isinstance(self, FedAvgM):
            if self.current_arrays is None:
                self.current_arrays = arrays
        else:
            self.current_arrays = {k: from_array(a) for k, a in arrays.items()}
        return super().configure_train(server_round, arrays, config, grid)


class AdaptiveServer(SeededServerOptimiser):
    """Shared constructor of the adaptive optimisers (server learning rate, moments, adaptivity).

    Parameters
    ----------
    active_clients, local, seed
        As :class:`~repro.federated.strategies.SeededFedAvg`.
    eta
        Server learning rate.
    beta_1, beta_2
        First- and second-moment decay; ``None`` keeps Flower's default for
        the optimiser (Adagrad ignores ``beta_2``).
    tau
        Adaptivity: added to the root of the second moment.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, eta: float = 1e-2,
                 beta_1: float | None = None, beta_2: float | None = None, tau: float = 1e-3) -> None:
        super().__init__(active_clients, local, seed=seed)
        if eta <= 0 or tau <= 0:
            raise ValueError(f"eta and tau must be > 0, got eta={eta}, tau={tau}")
        self.eta, self.tau = float(eta), float(tau)
        if beta_1 is not None:
            self.beta_1 = float(beta_1)
        if beta_2 is not None:
            self.beta_2 = float(beta_2)
        self.eta_l = float(local.get("lr", self.eta_l) or 0.0)  # informational in Flower: the clients' learning rate


class SeededFedAdam(AdaptiveServer, FedAdam):
    """Flower's ``FedAdam`` with seeded sampling (server Adam on the pseudo-gradient)."""


class SeededFedYogi(AdaptiveServer, FedYogi):
    """Flower's ``FedYogi`` with seeded sampling (server Yogi on the pseudo-gradient)."""


class SeededFedAdagrad(AdaptiveServer, FedAdagrad):
    """Flower's ``FedAdagrad`` with seeded sampling (server Adagrad on the pseudo-gradient)."""


class SeededFedAvgM(SeededServerOptimiser, FedAvgM):
    """Flower's ``FedAvgM`` (server SGD with momentum) with seeded sampling.

    Parameters
    ----------
    active_clients, local, seed
        As :class:`~repro.federated.strategies.SeededFedAvg`.
    server_lr, server_momentum
        Server SGD step and momentum; ``1.0`` and ``0.0`` give FedAvg.
    """

    def __init__(self, active_clients: int, local: dict[str, float | int], seed: int = 0, server_lr: float = 1.0,
                 server_momentum: float = 0.0) -> None:
        super().__init__(active_clients, local, seed=seed)
        self.server_learning_rate = float(server_lr)
        self.server_momentum = float(server_momentum)
        self.server_opt = self.server_learning_rate != 1.0 or self.server_momentum != 0.0


SERVER_OPTIMISERS = {"fedadam": SeededFedAdam, "fedyogi": SeededFedYogi, "fedadagrad": SeededFedAdagrad}
"""The adaptive FedOpt strategies by name."""
