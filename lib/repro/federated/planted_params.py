"""Parameters shared by the chapters whose clients fall into planted label-skew clusters (feddrl, cluster-skew-kd).

Both tune FedProx's proximal weight over a grid ``mus`` at one local SGD
setting, so both refuse the same impossible combinations and build the task
and the local optimiser the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.federated.client import LocalSGD
from repro.federated.task import TaskSpec, available_train
from repro.params import ChapterParams, require

PROXIMAL_PULL = 0.1
"""The smallest ``lr * mu * tau`` a FedProx grid value may have: below it the proximal pull removes under about
5% of a round's local drift, which leaves FedProx practically FedAvg."""


@dataclass(frozen=True, kw_only=True)
class PlantedClusterParams(ChapterParams):
    """The fields, checks and builders of a planted-cluster chapter; a driver's ``Params`` adds its own fields.

    Attributes
    ----------
    dataset, cluster_sizes, samples_per_client, alpha
        The task: ``sum(cluster_sizes)`` clients in planted clusters, each cluster with its own Dirichlet
        (``alpha``) label mix, ``samples_per_client`` samples each.
    hidden
        The MLP's hidden widths.
    tau, batch_size, lr
        Local SGD steps per round, batch size and learning rate.
    mus
        FedProx's proximal weights, the tuning grid.
    """

    dataset: str
    cluster_sizes: tuple[int, ...]
    samples_per_client: int
    alpha: float
    hidden: tuple[int, ...]
    tau: int
    batch_size: int
    lr: float
    mus: tuple[float, ...]

    def checks(self) -> None:
        """Refuse a FedProx grid value that leaves FedProx practically FedAvg, and clients that hold every sample."""
        require(all(self.lr * m * self.tau >= PROXIMAL_PULL for m in self.mus), self, ("mus", "lr", "tau"),
                f"every mu in mus must have lr * mu * tau >= {PROXIMAL_PULL}: a smaller proximal weight pulls the "
                "local model back by under about 5% of a round's drift, which leaves FedProx practically FedAvg")
        require(sum(self.cluster_sizes) * self.samples_per_client < available_train(self.dataset, None), self,
                ("cluster_sizes", "samples_per_client", "dataset"),
                "the clients must hold fewer samples than the dataset has, leaving a held-out set to tune on")

    def spec(self) -> TaskSpec:
        """The task: planted clusters of clients, each cluster with its own Dirichlet label mix."""
        return TaskSpec(dataset=self.dataset, num_clients=sum(self.cluster_sizes), scheme="cluster_skew",
                        alpha=self.alpha, cluster_sizes=self.cluster_sizes, samples_per_client=self.samples_per_client,
                        hidden=self.hidden, model="mlp", data_seed=0)

    def sgd(self) -> LocalSGD:
        """The clients' local SGD (no momentum)."""
        return LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=0.0)
