"""The FedGrad chapter: backdoor defences under the edge-case attack, and without attackers.

:class:`Params` holds the chapter's parameters; :func:`run` runs one
:class:`BackdoorRun` per defence, seed and condition (attacked or clean)
through :func:`run_one` into a :class:`BackdoorRecord` and returns the
:class:`Results`; :func:`claims` gives the ledger's evidence.  The figures and
the table are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from repro.federated import robust
from repro.federated.arrays import from_arrayrecord
from repro.federated.client import LocalSGD
from repro.federated.runs import FederatedRun, RunRecord, execute, records_frame
from repro.federated.task import TaskSpec, available_train, build_model, majority_accuracy
from repro.models import set_weights
from repro.params import ChapterParams, require
from repro.results import Evidence

DEFENCES = ("none", "norm-clipping", "multi-krum", "rfa", "rlr", "flame", "fedgrad")
NEEDED = ("none", "fedgrad")
"""The defences the claims compare."""


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``fedgrad.yaml``)."""

    dataset: str
    num_clients: int
    active_clients: int
    alpha: float
    attacker_share: float
    pdr: float
    hidden: tuple[int, ...]
    tau: int
    rounds: int
    batch_size: int
    lr: float
    clip_bound: float
    switch_round: int
    defences: tuple[str, ...]
    seeds: tuple[int, ...]
    eval_every: int
    engine: str
    device: str
    workers: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.active_clients <= self.num_clients, self, ("active_clients", "num_clients"),
                "active_clients must not exceed num_clients")
        require(all(d in self.defences for d in NEEDED), self, "defences",
                "defences must include none and fedgrad (the claims compare them)")
        require(self.num_attackers >= 1, self, ("attacker_share", "num_clients"),
                "the attacker pool round(attacker_share * num_clients) must hold at least one client")
        require(self.switch_round <= self.rounds, self, ("switch_round", "rounds"),
                "FedGrad's hard filter must start within the run")
        require(available_train(self.dataset, None) >= 2 * self.num_clients, self, ("dataset", "num_clients"),
                "the split needs at least 2 training samples per client")

    @property
    def num_attackers(self) -> int:
        """The size of the fixed attacker pool (the first partition ids)."""
        return int(round(self.attacker_share * self.num_clients))

    def spec(self) -> TaskSpec:
        """The task: the dataset split over the clients by a Dirichlet label skew."""
        return TaskSpec(dataset=self.dataset, num_clients=self.num_clients, scheme="dirichlet", alpha=self.alpha,
                        hidden=self.hidden, model="mlp", data_seed=0)

    def sgd(self) -> LocalSGD:
        """The clients' local SGD (no momentum)."""
        return LocalSGD(batch_size=self.batch_size, lr=self.lr, momentum=0.0)

    def attack(self) -> robust.EdgeCaseAttack:
        """The edge-case attack of the fixed attacker pool."""
        return robust.EdgeCaseAttack(spec=self.spec(), attackers=tuple(range(self.num_attackers)), pdr=self.pdr)


def make_defence(name: str, spec: TaskSpec, num_malicious: int, clip_bound: float,
                 switch_round: int, seed: int) -> robust.Defence:
    """A defence of :mod:`repro.federated.robust` by name (FedGrad reads the MLP's last layer; FLAME's noise uses ``seed``)."""
    last = f"fc{len(spec.hidden)}"
    makers = {
        "none": lambda: robust.NoDefence(),
        "norm-clipping": lambda: robust.NormClipping(clip_bound),
        "multi-krum": lambda: robust.MultiKrumDefence(num_malicious),
        "rfa": lambda: robust.RFA(),
        "rlr": lambda: robust.RobustLR(),
        "flame": lambda: robust.Flame(seed=seed),
        "fedgrad": lambda: robust.FedGradFilter(f"{last}.weight", f"{last}.bias", switch_round=switch_round,
                                               num_malicious=num_malicious),
    }
    if name not in makers:
        raise ValueError(f"parameter 'defences': must be among {DEFENCES}, got {name!r}")
    return makers[name]()


@dataclass(frozen=True, kw_only=True)
class BackdoorRun(FederatedRun):
    """One run under the edge-case attack (``attackers`` may be empty: a clean run); ``method`` is the defence.

    Attributes
    ----------
    attackers, pdr
        Attacker partition ids and their poisoned share.
    clip_bound, switch_round
        Norm bound of the clipping defence; FedGrad's first hard-filter round.
    """

    attackers: tuple[int, ...] = ()
    pdr: float = 0.33
    clip_bound: float = 1.0
    switch_round: int = 1

    methods: ClassVar[tuple[str, ...]] = DEFENCES


@dataclass(frozen=True, kw_only=True)
class BackdoorRecord(RunRecord):
    """One run's record: :class:`RunRecord`'s fields (``method`` is the defence) and these.

    Attributes
    ----------
    attacked
        Whether the run had attackers.
    backdoor
        Backdoor accuracy: percent of rotated test 7s the final model calls 1.
    tpr, fpr
        Attackers flagged over attackers sampled, honest clients flagged over honest sampled, over all rounds.
    """

    attacked: bool
    backdoor: float
    tpr: float
    fpr: float


def run_one(job: BackdoorRun) -> BackdoorRecord:
    """Run ``job`` and measure the final model on the main task and on the tail."""
    spec = job.spec
    attack = robust.EdgeCaseAttack(spec=spec, attackers=tuple(job.attackers), pdr=job.pdr, seed=job.seed)
    num_malicious = max(1, round(job.clients_per_round * len(job.attackers) / spec.num_clients))
    strat = robust.RobustFedAvg(job.clients_per_round, job.local,
                                make_defence(job.method, spec, num_malicious, job.clip_bound, job.switch_round, job.seed),
                                seed=job.seed)
    hist = job.simulate(strat, robust.make_attacked_client_app(attack, job.run_config))
    model = build_model(spec, seed=0)
    assert hist.final_arrays is not None
    set_weights(model, from_arrayrecord(hist.final_arrays))
    with torch.no_grad():
        pred = model(torch.from_numpy(robust.tail_sets(attack)[1])).argmax(1).numpy()
    rates = robust.detection_rates(strat.sampled, strat.flagged, job.attackers)
    return BackdoorRecord(method=job.method, seed=job.seed, accuracy=hist.final_accuracy, attacked=bool(job.attackers),
                          backdoor=robust.backdoor_accuracy(pred, attack), tpr=rates["tpr"], fpr=rates["fpr"])


def jobs(params: Params) -> list[BackdoorRun]:
    """Every defence under the attack, and every defence on the same task without attackers (false positives).

    The attackers are the first ``round(attacker_share * num_clients)`` partition ids (a fixed pool; the
    Dirichlet split is random, so they are not special otherwise).
    """
    spec, sgd, bad = params.spec(), params.sgd(), tuple(range(params.num_attackers))
    return [BackdoorRun(method=d, spec=spec, sgd=sgd, tau=params.tau, rounds=params.rounds,
                        active_clients=params.active_clients, seed=s, attackers=atk, pdr=params.pdr,
                        clip_bound=params.clip_bound, switch_round=params.switch_round, eval_every=params.eval_every,
                        engine=params.engine, device=params.device)
            for atk in (bad, ()) for d in params.defences for s in params.seeds]


@dataclass(frozen=True, kw_only=True)
class Results:
    """What the defence comparison produced.

    Attributes
    ----------
    final
        One row per run: ``defence, attacked, seed, accuracy, backdoor, tpr, fpr``.
    trivial
        Test accuracy of always predicting the majority class (percent).
    tail
        The test tail's images (rotated 7s), for the figure.
    """

    final: pd.DataFrame
    trivial: float
    tail: np.ndarray


def run(params: Params) -> Results:
    """Every defence with and without the attack, every seed."""
    done = execute(run_one, jobs(params), params.workers, desc="defences")
    final = records_frame(done, ("method", "attacked", "seed", "accuracy", "backdoor", "tpr", "fpr"))
    return Results(final=final.rename(columns={"method": "defence"}), trivial=majority_accuracy(params.spec()),
                   tail=robust.tail_sets(params.attack())[1])


def _pick(final: pd.DataFrame, defence: str, attacked: bool) -> pd.DataFrame:
    return final[(final.defence == defence) & (final.attacked == attacked)].set_index("seed")


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence.

    ``attack_works`` is the precondition of the defence claims: the undefended model's backdoor accuracy
    minus the clean model's base rate (the same test tail, no attacker, no defence).  Detection is judged
    by the true-positive minus the false-positive rate under attack, so a detector that excludes everyone
    (or no one) scores zero.
    """
    final = results.final
    grad, none, none_clean = _pick(final, "fedgrad", True), _pick(final, "none", True), _pick(final, "none", False)
    seeds = sorted(grad.index)
    arms = {"no defence": [float(none.accuracy[s]) for s in seeds], "FedGrad": [float(grad.accuracy[s]) for s in seeds]}
    return {
        "attack_works": [none.backdoor[s] - none_clean.backdoor[s] for s in seeds],
        "detection_tpr_minus_fpr": [100.0 * (grad.tpr[s] - grad.fpr[s]) for s in seeds],
        "backdoor_acc_pct": Evidence(values=[grad.backdoor[s] for s in seeds], arms={"FedGrad": arms["FedGrad"]},
                                     trivial=results.trivial),
        "main_acc_drop": Evidence(values=[none.accuracy[s] - grad.accuracy[s] for s in seeds], arms=arms,
                                  trivial=results.trivial),
    }


def clean_false_alarms(results: Results) -> float:
    """The share (percent) of honest clients FedGrad excluded when nobody attacked, mean over seeds."""
    return float(100.0 * _pick(results.final, "fedgrad", False).fpr.mean())


def tail_figure(results: Results, count: int = 8) -> Figure:
    """The first ``count`` test-tail images (rotated 7s that the attackers label 1)."""
    side = int(np.sqrt(results.tail.shape[1]))
    fig, axes = plt.subplots(1, count, figsize=(count, 1.3))
    for ax, img in zip(axes, results.tail[:count]):
        ax.imshow(img.reshape(side, side), cmap="gray_r")
        ax.axis("off")
    fig.suptitle("tail samples (rotated 7s) that the attackers label 1")
    return fig


# ----- figure and table ------------------------------------------------------------------
LABELS = {
    "none": "no defence",
    "norm-clipping": "norm clipping",
    "multi-krum": "Multi-Krum",
    "rfa": "RFA",
    "rlr": "RLR",
    "flame": "FLAME",
    "fedgrad": "FedGrad",
}


def defence_bars(results: Results) -> Figure:
    """Main-task and backdoor accuracy per defence under attack (bars: mean; ticks: each seed)."""
    att = results.final[results.final.attacked]
    order = [d for d in LABELS if d in set(att.defence)]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(order))
    for off, col, colour, label in (
        (-0.2, "accuracy", "tab:blue", "main-task accuracy"),
        (0.2, "backdoor", "tab:red", "backdoor accuracy"),
    ):
        means = [att[att.defence == d][col].mean() for d in order]
        ax.bar(x + off, means, width=0.4, color=colour, alpha=0.8, label=label)
        for i, d in enumerate(order):
            ax.plot([x[i] + off] * int((att.defence == d).sum()), att[att.defence == d][col], "k_", ms=10)
    ax.set_xticks(x, [LABELS[d] for d in order])
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.legend(loc="upper center", ncols=2, fontsize=8)
    fig.tight_layout()
    return fig


def summary_table(results: Results) -> pd.DataFrame:
    """Per defence: accuracy and backdoor accuracy under attack, detection rates with and without attackers."""
    final = results.final
    rows = []
    for d in [d for d in LABELS if d in set(final.defence)]:
        a = final[(final.defence == d) & final.attacked]
        c = final[(final.defence == d) & ~final.attacked]
        rows.append(
            {
                "defence": LABELS[d],
                "main-task accuracy (%)": f"{a.accuracy.mean():.1f} ± {a.accuracy.std():.1f}",
                "backdoor accuracy (%)": f"{a.backdoor.mean():.1f} ± {a.backdoor.std():.1f}",
                "attackers flagged (TPR, %)": f"{100 * a.tpr.mean():.0f}",
                "honest flagged, attacked (FPR, %)": f"{100 * a.fpr.mean():.0f}",
                "honest flagged, no attack (FPR, %)": f"{100 * c.fpr.mean():.0f}",
                "clean accuracy (%)": f"{c.accuracy.mean():.1f}",
            }
        )
    return pd.DataFrame(rows)
