"""The FedAudio chapter: federated keyword spotting under SNR noise and label noise, FedAvg against FedOpt.

:class:`Params` holds the chapter's parameters.  :class:`AudioRun` is one
seeded run, :func:`run_one` executes it and returns an :class:`AudioRecord`;
:func:`tune` gives every aggregator the same number of settings on a tuning
seed, scores them on validation clips (never the test set) and keeps each
one's best, a setting that diverges (non-finite loss or weights) losing the
tuning whatever it scored; :func:`sweep` runs the tuned aggregators on clean
data and tuned FedAvg under every noise level; :func:`run` does both and
returns the :class:`Results`, which :func:`claims` turns into the ledger's
evidence.  The figures and tables are the chapter's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from repro.federated.arrays import from_arrayrecord
from repro.federated.audio import KEYWORD_CLASSES
from repro.federated.engine import History, RunSummary, eval_schedule, run_federated
from repro.federated.fedopt import SERVER_OPTIMISERS
from repro.federated.figures import accuracy_curves
from repro.federated.keywords import (
    FRAMES,
    N_MELS,
    KeywordTask,
    keyword_data,
    keyword_evaluator,
    keyword_initial,
    make_keyword_client_app,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.tuning import best_settings, chosen
from repro.parallel import parallel_map
from repro.params import ChapterParams, require
from repro.results import Evidence

AGGREGATORS = ("fedavg", "fedadam", "fedyogi", "fedadagrad")
LABELS = {"fedavg": "FedAvg", "fedadam": "FedAdam", "fedyogi": "FedYogi", "fedadagrad": "FedAdagrad"}
COLOURS = {"fedavg": "tab:gray", "fedadam": "tab:blue", "fedyogi": "tab:orange", "fedadagrad": "tab:green"}
CONDITIONS = ("clean", "snr", "label_noise")
SPLITS = ("test", "validation")


@dataclass(frozen=True, kw_only=True)
class Params(ChapterParams):
    """The chapter's parameters (the registry schema's, one field each; see ``fedaudio.yaml``)."""

    num_speakers: int
    train_clips: int
    test_clips: int
    valid_clips: int
    imbalance: float
    active_clients: int
    steps: int
    batch_size: int
    rounds: int
    lr: float
    client_lrs: tuple[float, ...]
    server_lrs: tuple[float, ...]
    tune_seed: int
    snrs: tuple[float, ...]
    label_noises: tuple[float, ...]
    seeds: tuple[int, ...]
    workers: int
    device: str
    eval_every: int

    def checks(self) -> None:
        """Refuse the impossible combinations before any run starts."""
        require(self.active_clients <= self.num_speakers, self, ("active_clients", "num_speakers"),
                "active_clients must not exceed num_speakers (one client per speaker)")
        require(len(self.client_lrs) == len(self.server_lrs) >= 1, self, ("client_lrs", "server_lrs"),
                "equal tuning budgets: client_lrs and server_lrs need the same (non-zero) length")
        require(self.tune_seed not in self.seeds, self, ("tune_seed", "seeds"), "tune on a seed that is not reported")
        require(all(0 < e < 1 for e in self.label_noises), self, "label_noises",
                "label-noise levels must lie strictly between 0 and 1 (the clean run is always included)")
        require(self.eval_every <= self.rounds, self, ("eval_every", "rounds"),
                "eval_every must not exceed rounds (the budget accuracy needs an evaluation)")

    def task(self) -> KeywordTask:
        """The clean federation of speakers (data seed 0)."""
        return KeywordTask(num_speakers=self.num_speakers, train_clips=self.train_clips, test_clips=self.test_clips,
                           imbalance=self.imbalance, seed=0, valid_clips=self.valid_clips)

    def schedule(self) -> Schedule:
        """What every run shares."""
        return Schedule(steps=self.steps, batch_size=self.batch_size, rounds=self.rounds,
                        active_clients=self.active_clients, eval_every=self.eval_every, device=self.device)


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """What every run of a sweep shares: local training, rounds, sampling, evaluation, and the clients' device.

    Attributes
    ----------
    steps, batch_size, rounds, active_clients, eval_every
        Local steps per round, batch size, rounds, clients sampled per round, evaluation period.
    device
        Where the clients train (``cpu``, ``cuda`` or ``auto``).
    """

    steps: int
    batch_size: int
    rounds: int
    active_clients: int
    eval_every: int
    device: str = "cpu"


@dataclass(frozen=True, kw_only=True)
class AudioRun:
    """One run; field names follow the chapter's parameters.

    Attributes
    ----------
    aggregator
        One of :data:`AGGREGATORS`.
    condition, level
        ``clean`` (level 0), ``snr`` (level = SNR in dB) or ``label_noise`` (level = eps).
    seed
        Run seed (model init, client sampling, mini-batches); the data are fixed by ``task.seed``.
    task
        The clean federation; the condition is applied by :meth:`recorded_task`.
    lr, server_lr
        Clients' learning rate; the server optimiser's (ignored by FedAvg).
    schedule
        Local training, rounds, sampling, evaluation period and device, shared by the sweep's runs.
    progress
        Label of a progress bar (``None``: none).
    scored_on
        The split the run's evaluations read: ``test`` (reported runs) or ``validation`` (tuning runs).
    """

    aggregator: str
    condition: str
    level: float
    seed: int
    task: KeywordTask
    lr: float
    server_lr: float
    schedule: Schedule
    progress: str | None = None
    scored_on: str = "test"

    def __post_init__(self) -> None:
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"parameter 'aggregator': must be one of {AGGREGATORS}, got {self.aggregator!r}")
        if self.condition not in CONDITIONS:
            raise ValueError(f"condition must be one of {CONDITIONS}, got {self.condition!r}")
        if self.scored_on not in SPLITS:
            raise ValueError(f"parameter 'scored_on': must be one of {SPLITS}, got {self.scored_on!r}")

    def recorded_task(self) -> KeywordTask:
        """The federation under this run's condition."""
        if self.condition == "snr":
            return replace(self.task, snr=float(self.level))
        if self.condition == "label_noise":
            return replace(self.task, label_noise=float(self.level))
        return self.task


@dataclass(frozen=True, kw_only=True)
class AudioRecord:
    """What one run produced.

    Accuracies are in percent on the run's ``scored_on`` split; ``curve`` is ``(round, accuracy)`` per
    evaluation; ``diverged`` is true when an evaluation's loss or the final model's weights are not finite.
    """

    aggregator: str
    condition: str
    level: float
    seed: int
    lr: float
    server_lr: float
    accuracy: float
    budget_accuracy: float
    curve: tuple[tuple[int, float], ...]
    diverged: bool = False


def diverged(history: History) -> bool:
    """Whether a run diverged: a non-finite evaluation loss, or a non-finite weight in the final global model."""
    if not np.all(np.isfinite(history.loss)):
        return True
    final = {} if history.final_arrays is None else from_arrayrecord(history.final_arrays)
    return not all(np.all(np.isfinite(w)) for w in final.values())


def build_strategy(job: AudioRun) -> SeededFedAvg:
    """FedAvg, or one of Flower's FedOpt strategies with the job's server learning rate (seeded sampling)."""
    plan = job.schedule
    local = {"steps": plan.steps, "lr": job.lr, "momentum": 0.0, "batch-size": plan.batch_size}
    if job.aggregator == "fedavg":
        return SeededFedAvg(plan.active_clients, local, seed=job.seed)
    return SERVER_OPTIMISERS[job.aggregator](plan.active_clients, local, seed=job.seed, eta=job.server_lr)


def run_one(job: AudioRun) -> AudioRecord:
    """Run ``job`` on the in-process Flower engine, evaluating on its ``scored_on`` split."""
    task, plan = job.recorded_task(), job.schedule
    app = make_keyword_client_app(task, {"seed": job.seed, "device": plan.device})
    hist = run_federated(
        build_strategy(job),
        app,
        task.num_speakers,
        keyword_initial(job.seed),
        plan.rounds,
        keyword_evaluator(task, job.scored_on),
        eval_schedule(plan.rounds, plan.eval_every),
        progress=job.progress,
    )
    s = RunSummary.of(hist)
    return AudioRecord(
        aggregator=job.aggregator,
        condition=job.condition,
        level=job.level,
        seed=job.seed,
        lr=job.lr,
        server_lr=job.server_lr,
        accuracy=s.accuracy,
        budget_accuracy=s.budget_accuracy,
        curve=s.curve,
        diverged=diverged(hist),
    )


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One setting an aggregator tried on the tuning seed, and how it did on the validation clips."""

    lr: float
    server_lr: float
    validation_accuracy: float
    diverged: bool

    @property
    def setting(self) -> str:
        """The setting in words (FedAvg's client rate, or a FedOpt aggregator's server rate)."""
        return f"client lr {self.lr:g}" if math.isnan(self.server_lr) else f"server lr {self.server_lr:g}"


@dataclass(frozen=True, kw_only=True)
class Tuned:
    """An aggregator's chosen setting and every candidate it tried (none when its grid has one value)."""

    aggregator: str
    lr: float
    server_lr: float
    candidates: tuple[Candidate, ...]

    @property
    def diverged(self) -> tuple[Candidate, ...]:
        """The candidates that diverged on the tuning seed (they lost the tuning)."""
        return tuple(c for c in self.candidates if c.diverged)


def candidates(aggregator: str, lr: float, client_lrs: list[float], server_lrs: list[float]) -> list[tuple[float, float]]:
    """``(client lr, server lr)`` settings an aggregator is tuned over: FedAvg its client lr, FedOpt its server lr.

    Both grids must have the same length, so every aggregator gets the same budget.
    """
    if len(client_lrs) != len(server_lrs):
        raise ValueError(f"equal tuning budgets need grids of one length, got {len(client_lrs)} and {len(server_lrs)}")
    if aggregator == "fedavg":
        return [(float(c), math.nan) for c in client_lrs]
    return [(float(lr), float(s)) for s in server_lrs]


def tune(params: Params) -> dict[str, Tuned]:
    """Every aggregator's best setting on clean data, judged on ``params.tune_seed`` (not a reported seed).

    Tuning runs are scored on the task's validation clips, never on the test set.  The choice is
    :func:`repro.federated.tuning.best_settings` (grids of one size, best validation accuracy at the
    budget); a setting that diverged (:func:`diverged`) is a failed setting and loses whatever it scored.
    A grid of one value is taken as is, without a run.

    Raises
    ------
    ValueError
        If the grids differ in length, if the task has no validation clips and there is a grid to tune
        over, or if every setting of an aggregator diverged.
    """
    task, schedule, lr = params.task(), params.schedule(), params.lr
    grids = {a: candidates(a, lr, list(params.client_lrs), list(params.server_lrs)) for a in AGGREGATORS}
    if len(params.client_lrs) == 1:
        return {a: Tuned(aggregator=a, lr=grids[a][0][0], server_lr=grids[a][0][1], candidates=()) for a in AGGREGATORS}
    if task.valid_clips < 1:
        raise ValueError("parameter 'valid_clips': tuning needs validation clips (valid_clips >= 1)")
    jobs = [
        AudioRun(aggregator=a, condition="clean", level=0.0, seed=params.tune_seed, task=task, lr=c, server_lr=s,
                 schedule=schedule, scored_on="validation")
        for a in AGGREGATORS for c, s in grids[a]
    ]
    done = parallel_map(run_one, jobs, params.workers, desc="tuning")
    tried = pd.DataFrame(
        [
            {
                "method": r.aggregator,
                "setting": r.lr if r.aggregator == "fedavg" else r.server_lr,
                "seed": r.seed,
                "validation_accuracy": r.budget_accuracy,
                "diverged": r.diverged,
            }
            for r in done
        ]
    )
    best = chosen(best_settings(tried, "validation_accuracy", failed="diverged"))
    out = {}
    for a in AGGREGATORS:
        c, s = (best[a], math.nan) if a == "fedavg" else (lr, best[a])
        out[a] = Tuned(
            aggregator=a,
            lr=c,
            server_lr=s,
            candidates=tuple(
                Candidate(lr=r.lr, server_lr=r.server_lr, validation_accuracy=r.budget_accuracy, diverged=r.diverged)
                for r in done
                if r.aggregator == a
            ),
        )
    return out


def sweep(params: Params, tuned: dict[str, Tuned]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tuned aggregators on clean data, and tuned FedAvg at every SNR and label-noise level, for every seed.

    Returns
    -------
    final : DataFrame
        One row per run: ``aggregator, condition, level, seed, lr, server_lr, accuracy, budget_accuracy,
        diverged``.
    curves : DataFrame
        ``aggregator, condition, level, seed, round, accuracy`` at every evaluation.
    """
    task, schedule = params.task(), params.schedule()

    def job(aggregator: str, condition: str, level: float, seed: int) -> AudioRun:
        t = tuned[aggregator]
        return AudioRun(aggregator=aggregator, condition=condition, level=level, seed=seed, task=task, lr=t.lr,
                        server_lr=t.server_lr, schedule=schedule)

    jobs = []
    for seed in params.seeds:
        jobs += [job(a, "clean", 0.0, seed) for a in AGGREGATORS]
        jobs += [job("fedavg", "snr", float(v), seed) for v in params.snrs]
        jobs += [job("fedavg", "label_noise", float(v), seed) for v in params.label_noises]
    done = parallel_map(run_one, jobs, params.workers, desc="runs")
    keys = ("aggregator", "condition", "level", "seed")
    final = pd.DataFrame(
        [
            {
                **{k: getattr(r, k) for k in keys},
                "lr": r.lr,
                "server_lr": r.server_lr,
                "accuracy": r.accuracy,
                "budget_accuracy": r.budget_accuracy,
                "diverged": r.diverged,
            }
            for r in done
        ]
    )
    curves = pd.DataFrame([{**{k: getattr(r, k) for k in keys}, "round": rd, "accuracy": a} for r in done for rd, a in r.curve])
    return final, curves


@dataclass(frozen=True, kw_only=True)
class Results:
    """What one run of the chapter produced.

    Attributes
    ----------
    final
        One row per reported run (:func:`sweep`).
    curves
        Accuracy at every evaluation of every reported run.
    tuned
        Every aggregator's chosen setting and the candidates it tried (:func:`tune`).
    trivial
        Test accuracy of always answering the test set's most common class (percent; chance on the
        class-balanced test set).
    """

    final: pd.DataFrame
    curves: pd.DataFrame
    tuned: dict[str, Tuned]
    trivial: float


def majority_share(task: KeywordTask) -> float:
    """Percent of the test clips in the most common class: the accuracy of always answering it."""
    y = keyword_data(task.clean()).y_test
    return float(100.0 * np.bincount(y).max() / len(y))


def run(params: Params) -> Results:
    """Tune every aggregator on the tuning seed, then run the reported seeds (:func:`tune`, :func:`sweep`)."""
    tuned = tune(params)
    final, curves = sweep(params, tuned)
    return Results(final=final, curves=curves, tuned=tuned, trivial=majority_share(params.task()))


# ----- claims -----------------------------------------------------------------------------
def ladder(final: pd.DataFrame, condition: str) -> pd.DataFrame:
    """FedAvg's accuracy per seed (rows) along a noise ladder (columns), cleanest first.

    The clean run heads the ladder; SNR levels follow from high to low, label-noise levels from low to high.
    """
    avg = final[final.aggregator == "fedavg"]
    clean = avg[avg.condition == "clean"].set_index("seed").budget_accuracy.rename("clean")
    noisy = avg[avg.condition == condition].pivot(index="seed", columns="level", values="budget_accuracy")
    noisy = noisy[sorted(noisy.columns, reverse=condition == "snr")]
    return pd.concat([clean, noisy], axis=1)


def claims(results: Results) -> dict[str, Evidence | list[float]]:
    """The ledger's evidence (points of accuracy per seed).

    The noise claims' arm is FedAvg on clean data (the noisy runs' fall toward chance is what they
    measure); the aggregator claim's arms are tuned FedAvg and tuned FedAdam on clean data.
    """
    final = results.final
    out: dict[str, Evidence | list[float]] = {}
    for condition in ("snr", "label_noise"):
        steps = ladder(final, condition)
        drops = -steps.diff(axis=1).iloc[:, 1:]
        arms = {"FedAvg, clean": [float(v) for v in steps.iloc[:, 0]]}
        out[f"{condition}_drop"] = Evidence(values=[float(v) for v in steps.iloc[:, 0] - steps.iloc[:, -1]],
                                            arms=arms, trivial=results.trivial)
        out[f"{condition}_monotone"] = Evidence(values=[float(v) for v in drops.min(axis=1)], arms=arms,
                                                trivial=results.trivial)
    clean = final[final.condition == "clean"]
    acc = {a: clean[clean.aggregator == a].set_index("seed").budget_accuracy for a in ("fedavg", "fedadam")}
    seeds = sorted(acc["fedavg"].index)
    out["fedadam_shortfall"] = Evidence(values=[float(acc["fedavg"][s] - acc["fedadam"][s]) for s in seeds],
                                        arms={LABELS[a]: [float(acc[a][s]) for s in seeds] for a in acc},
                                        trivial=results.trivial)
    return out


# ----- figures and tables ----------------------------------------------------------------------
def noise_figure(final: pd.DataFrame) -> Figure:
    """FedAvg's accuracy along the SNR ladder and the label-noise ladder (mean over seeds, error bar = sd)."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6), sharey=True)
    for ax, condition, xlabel in ((axes[0], "snr", "SNR of the recordings (dB)"), (axes[1], "label_noise", "label-noise rate ε")):
        steps = ladder(final, condition)
        names = ["clean"] + [f"{v:g}" for v in steps.columns[1:]]
        sd = steps.std(ddof=1) if len(steps) > 1 else steps.mean() * 0
        ax.errorbar(range(len(names)), steps.mean(), yerr=sd, marker="o", capsize=3, color="tab:blue")
        ax.set_xticks(range(len(names)), names)
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel("test accuracy, FedAvg (%)")
    fig.tight_layout()
    return fig


def clean_curves(curves: pd.DataFrame) -> Figure:
    """Test accuracy against rounds of each tuned aggregator on clean data (mean over seeds, band min to max)."""
    return accuracy_curves(curves[curves.condition == "clean"], "aggregator", AGGREGATORS, LABELS, COLOURS, "test accuracy (%)")


def clean_table(final: pd.DataFrame, tuned: dict[str, Tuned]) -> pd.DataFrame:
    """The miniature of the benchmark's clean table: accuracy per aggregator (mean ± sd) with its tuned setting."""
    rows = []
    clean = final[final.condition == "clean"]
    for a in AGGREGATORS:
        r = clean[clean.aggregator == a].budget_accuracy
        t = tuned[a]
        setting = f"client lr {t.lr:g}" if a == "fedavg" else f"client lr {t.lr:g}, server lr {t.server_lr:g}"
        rows.append(
            {
                "aggregator": LABELS[a],
                "tuned setting": setting,
                "settings tried": max(1, len(t.candidates)),
                "accuracy (%)": f"{r.mean():.1f} ± {r.std(ddof=1) if len(r) > 1 else 0.0:.1f}",
                "seeds": len(r),
            }
        )
    return pd.DataFrame(rows)


def tuning_table(tuned: dict[str, Tuned]) -> pd.DataFrame:
    """Every setting each aggregator tried: validation accuracy on the tuning seed, whether it diverged, which won."""
    rows = []
    for a in AGGREGATORS:
        t = tuned[a]
        for c in t.candidates:
            rows.append(
                {
                    "aggregator": LABELS[a],
                    "setting": c.setting,
                    "validation accuracy (%)": f"{c.validation_accuracy:.1f}",
                    "diverged": "yes" if c.diverged else "no",
                    "chosen": "yes" if c.lr == t.lr and (c.server_lr == t.server_lr or math.isnan(t.server_lr)) else "",
                }
            )
    return pd.DataFrame(rows)


def divergence_text(tuned: dict[str, Tuned], final: pd.DataFrame) -> str:
    """One paragraph naming the settings that diverged in tuning and the reported runs that diverged."""
    lost = [f"{LABELS[a]} at {c.setting}" for a in AGGREGATORS for c in tuned[a].diverged]
    tried = sum(len(t.candidates) for t in tuned.values())
    if tried == 0:
        tuning = "No tuning ran (every grid has one value), so no setting could fail."
    elif lost:
        tuning = (
            f"Of the {tried} settings tried on the tuning seed, {len(lost)} diverged (a non-finite loss or weight) "
            f"and lost the tuning: {', '.join(lost)}."
        )
    else:
        tuning = f"None of the {tried} settings tried on the tuning seed diverged."
    bad = final[final.diverged]
    if bad.empty:
        return f"{tuning} None of the {len(final)} reported runs diverged."
    runs = ", ".join(
        f"{LABELS[r.aggregator]} {r.condition.replace('_', ' ')}{'' if r.condition == 'clean' else f' {r.level:g}'} seed {r.seed}"
        for r in bad.itertuples()
    )
    return (
        f"{tuning} {len(bad)} of the {len(final)} reported runs diverged at their tuned setting ({runs}); "
        "their accuracy (chance level or near it) stays in the tables and claims."
    )


def noise_table(final: pd.DataFrame) -> pd.DataFrame:
    """FedAvg's accuracy (mean ± sd over seeds) at every noise level, and its drop from clean data."""
    rows = []
    for condition, what in (("snr", "SNR (dB)"), ("label_noise", "label noise ε")):
        steps = ladder(final, condition)
        base = steps["clean"]
        for col in steps.columns[1:]:
            drop = base - steps[col]
            rows.append(
                {
                    "noise": what,
                    "level": f"{col:g}",
                    "accuracy (%)": f"{steps[col].mean():.1f} ± {steps[col].std(ddof=1) if len(steps) > 1 else 0.0:.1f}",
                    "drop from clean (points)": f"{drop.mean():.1f}",
                }
            )
    return pd.DataFrame(rows)


def spectrogram_figure(task: KeywordTask, snr: float, speaker: int = 0) -> Figure:
    """The first test clip of every class said by one speaker: log-mel on clean recordings and at ``snr`` dB."""
    rows = [("clean", keyword_data(task.clean())), (f"{snr:g} dB", keyword_data(replace(task.clean(), snr=snr)))]
    labels = keyword_data(task.clean()).y_test
    own = np.arange(speaker * task.test_clips, (speaker + 1) * task.test_clips)
    first = [int(own[labels[own] == c][0]) for c in range(len(KEYWORD_CLASSES)) if (labels[own] == c).any()]
    fig, axes = plt.subplots(2, len(first), figsize=(1.3 * len(first), 3.2), squeeze=False)
    for (name, data), row in zip(rows, axes):
        for ax, i in zip(row, first):
            ax.imshow(data.x_test[i].reshape(N_MELS, FRAMES), origin="lower", aspect="auto", cmap="magma", vmin=-1, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
        row[0].set_ylabel(name)
    for ax, i in zip(axes[0], first):
        ax.set_title(KEYWORD_CLASSES[int(labels[i])].replace("_", " "), fontsize=8)
    fig.tight_layout()
    return fig
