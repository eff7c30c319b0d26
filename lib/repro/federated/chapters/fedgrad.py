"""The FedGrad chapter: backdoor defences under the edge-case attack, and without attackers.

:class:`BackdoorRun` is one seeded run, :func:`run` executes it,
:func:`sweep` runs every defence with and without the attack,
:func:`claims` gives the ledger's per-seed values; the figure and the table
are the chapter's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from repro.federated import robust
from repro.federated.arrays import from_arrayrecord
from repro.federated.client import LocalSGD
from repro.federated.engine import central_evaluator, eval_schedule, initial_arrays, run_federated
from repro.federated.task import TaskSpec, build_model
from repro.models import set_weights
from repro.parallel import parallel_map

DEFENCES = ("none", "norm-clipping", "multi-krum", "rfa", "flame-lite", "fedgrad")


def make_defence(name: str, spec: TaskSpec, num_malicious: int, clip_bound: float,
                 switch_round: int) -> robust.Defence:
    """A defence of :mod:`repro.federated.robust` by name; FedGrad inspects the MLP's last layer."""
    last = f"fc{len(spec.hidden)}"
    makers = {
        "none": lambda: robust.NoDefence(),
        "norm-clipping": lambda: robust.NormClipping(clip_bound),
        "multi-krum": lambda: robust.MultiKrumDefence(num_malicious),
        "rfa": lambda: robust.RFA(),
        "flame-lite": lambda: robust.FlameLite(),
        "fedgrad": lambda: robust.FedGradFilter(f"{last}.weight", f"{last}.bias", switch_round=switch_round,
                                               num_malicious=num_malicious),
    }
    if name not in makers:
        raise ValueError(f"parameter 'defences': must be among {DEFENCES}, got {name!r}")
    return makers[name]()


@dataclass(frozen=True, kw_only=True)
class BackdoorRun:
    """One run under the edge-case attack (``attackers`` may be empty: a clean run); names as the chapter's parameters.

    Attributes
    ----------
    defence
        One of :data:`DEFENCES`.
    spec, sgd, tau, rounds, active_clients, seed
        Task, local training, local steps, rounds, clients per round, run seed.
    attackers, pdr
        Attacker partition ids and their poisoned share.
    clip_bound, switch_round
        Norm bound of the clipping defence; FedGrad's first hard-filter round.
    eval_every, engine
        Evaluation period (rounds) and engine.
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``).
    """

    defence: str
    spec: TaskSpec
    sgd: LocalSGD
    tau: int
    rounds: int
    active_clients: int
    seed: int
    attackers: tuple[int, ...]
    pdr: float
    clip_bound: float
    switch_round: int
    eval_every: int = 10
    engine: str = "inprocess"
    device: str = "cpu"


def run(job: BackdoorRun) -> dict:
    """One run's record.

    Returns
    -------
    dict
        ``defence, attacked, seed``, main-task ``accuracy`` (final), backdoor accuracy ``backdoor``
        (percent of rotated test 7s called 1), and the detection rates ``tpr``, ``fpr`` over all rounds.
    """
    spec = job.spec
    attack = robust.EdgeCaseAttack(spec=spec, attackers=tuple(job.attackers), pdr=job.pdr, seed=job.seed)
    num_malicious = max(1, round(job.active_clients * len(job.attackers) / spec.num_clients))
    strat = robust.RobustFedAvg(job.active_clients, job.sgd.config(job.tau),
                                make_defence(job.defence, spec, num_malicious, job.clip_bound, job.switch_round),
                                seed=job.seed)
    app = robust.make_attacked_client_app(attack, {"seed": job.seed, "device": job.device})
    hist = run_federated(strat, app, spec.num_clients,
                         initial_arrays(spec, job.seed), job.rounds, central_evaluator(spec),
                         eval_schedule(job.rounds, job.eval_every), engine=job.engine)
    model = build_model(spec, seed=0)
    set_weights(model, from_arrayrecord(hist.final_arrays))
    with torch.no_grad():
        pred = model(torch.from_numpy(robust.tail_sets(attack)[1])).argmax(1).numpy()
    rates = robust.detection_rates(strat.sampled, strat.flagged, job.attackers)
    return {"defence": job.defence, "attacked": bool(job.attackers), "seed": job.seed,
            "accuracy": hist.final_accuracy, "backdoor": robust.backdoor_accuracy(pred, attack),
            "tpr": rates["tpr"], "fpr": rates["fpr"]}


def sweep(spec: TaskSpec, sgd: LocalSGD, tau: int, rounds: int, active_clients: int, seeds: list[int],
          attacker_share: float, pdr: float, clip_bound: float, switch_round: int, eval_every: int,
          defences: Sequence[str] = DEFENCES, engine: str = "inprocess", workers: int = 1,
          device: str = "cpu") -> pd.DataFrame:
    """Every defence under the attack, and every defence on the same task without attackers (false positives).

    The attackers are the first ``round(attacker_share * num_clients)`` partition ids (a fixed pool; the
    Dirichlet split is random, so they are not special otherwise).
    """
    bad = tuple(range(int(round(attacker_share * spec.num_clients))))
    jobs = [
        BackdoorRun(
            defence=d,
            spec=spec,
            sgd=sgd,
            tau=tau,
            rounds=rounds,
            active_clients=active_clients,
            seed=s,
            attackers=atk,
            pdr=pdr,
            clip_bound=clip_bound,
            switch_round=switch_round,
            eval_every=eval_every,
            engine=engine,
            device=device,
        )
        for atk in (bad, ())
        for d in defences
        for s in seeds
    ]
    return pd.DataFrame(parallel_map(run, jobs, workers if engine == "inprocess" else 1, desc="defences"))


def claims(results: pd.DataFrame) -> dict[str, list[float]]:
    """Per-seed values of the chapter's claims.

    ``attack_works`` is the precondition of the defence claims: the undefended model's backdoor accuracy
    minus the clean model's base rate (the same test tail, no attacker, no defence).  Detection is judged
    by the true-positive minus the false-positive rate under attack, so a detector that excludes everyone
    (or no one) scores zero.
    """

    def pick(defence: str, attacked: bool) -> pd.DataFrame:
        return results[(results.defence == defence) & (results.attacked == attacked)].set_index("seed")

    grad, grad_clean = pick("fedgrad", True), pick("fedgrad", False)
    none, none_clean = pick("none", True), pick("none", False)
    seeds = sorted(grad.index)
    return {
        "attack_works": [none.backdoor[s] - none_clean.backdoor[s] for s in seeds],
        "detection_tpr_minus_fpr": [100.0 * (grad.tpr[s] - grad.fpr[s]) for s in seeds],
        "backdoor_acc_pct": [grad.backdoor[s] for s in seeds],
        "main_acc_drop": [none.accuracy[s] - grad.accuracy[s] for s in seeds],
        "clean_fpr_pct": [100.0 * grad_clean.fpr[s] for s in seeds],
    }


# ----- figure and table ------------------------------------------------------------------
LABELS = {
    "none": "no defence",
    "norm-clipping": "norm clipping",
    "multi-krum": "Multi-Krum",
    "rfa": "RFA",
    "flame-lite": "FLAME-lite",
    "fedgrad": "FedGrad",
}


def defence_bars(results: pd.DataFrame) -> Figure:
    """Main-task and backdoor accuracy per defence under attack (bars: mean; ticks: each seed)."""
    att = results[results.attacked]
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


def summary_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per defence: accuracy and backdoor accuracy under attack, detection rates with and without attackers."""
    rows = []
    for d in [d for d in LABELS if d in set(results.defence)]:
        a = results[(results.defence == d) & results.attacked]
        c = results[(results.defence == d) & ~results.attacked]
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
