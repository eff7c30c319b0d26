"""The partial-shuffle driver: BatchNorm statistics averaged over the workers for the judged accuracy, checks, claims."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.params import ParameterError, load_profiles
from repro.registry import load_registry
from repro.results import Evidence, Ledger
from repro.training.chapters import partial_shuffle as driver
from repro.training.shuffling import averaged_bn_statistics
from repro.training.simulator import ReplicaBank, Topology, build_template, evaluate

CHAPTER = load_registry().get("partial-shuffle")


def _params(**changes) -> driver.Params:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in load_profiles(CHAPTER)["smoke"].items()}
    return driver.Params(**{**values, **changes})


@pytest.mark.parametrize(("changes", "named"), [
    ({"claim_q": 0.3}, "'claim_q', 'q_values'"),
    ({"claim_q": 1.0, "q_values": (1.0,)}, "'claim_q'"),
    ({"schemes": ("iid",)}, "'schemes'"),
    ({"n_informative": 40}, "'n_informative', 'n_features'"),
    ({"n_informative": 2, "num_classes": 8}, "'num_classes', 'n_informative'"),
    ({"batch_size": 1000}, "'n_samples', 'num_workers', 'batch_size'"),
    ({"check_samples": 200, "batch_size": 90}, "'check_samples', 'batch_size'"),
    ({"warmup_epochs": 4.0}, "'warmup_epochs', 'epochs'"),
])
def test_impossible_combinations_are_refused_by_name(changes, named):
    _params().checks()
    with pytest.raises(ParameterError, match=named):
        _params(**changes).checks()


def _bank_with_divergent_workers() -> tuple[ReplicaBank, torch.Tensor, torch.Tensor]:
    bank = ReplicaBank(build_template(6, (8,), 3, batch_norm=True, seed=0), Topology(num_groups=1, group_size=4))
    gen = torch.Generator().manual_seed(0)
    # each worker trains on inputs shifted differently: their running statistics differ
    x = torch.randn(1, 4, 16, 6, generator=gen) + torch.arange(4.0).view(1, 4, 1, 1) * 3
    bank.train()
    for _ in range(20):
        bank(x)
    xt, yt = torch.randn(64, 6, generator=gen) * 4 + 4, torch.randint(0, 3, (64,), generator=gen)
    return bank, xt, yt


def test_averaged_statistics_are_the_workers_mean_and_are_restored_after():
    bank, xt, yt = _bank_with_divergent_workers()
    before = {n: b.clone() for n, b in bank.named_buffers()}
    worker0 = evaluate(bank, xt, yt)
    with averaged_bn_statistics(bank):
        mean0 = bank.running_mean0.clone()
        averaged = evaluate(bank, xt, yt)
    np.testing.assert_allclose(mean0[0, 0].numpy(), before["running_mean0"][0].mean(dim=0).numpy(), rtol=1e-6)
    assert not torch.allclose(before["running_mean0"][0, 0], mean0[0, 0])  # worker 0's own is not the average
    assert averaged != worker0
    for n, b in bank.named_buffers():
        assert torch.equal(b, before[n]), n


def test_the_judged_accuracy_claims_read_the_averaged_statistics():
    p = _params(seeds=(0, 1))

    def run(scheme: str, q: float, seed: int) -> driver.ShuffleRun:
        averaged = 80.0 if q == 1.0 else 60.0
        return driver.ShuffleRun(scheme=scheme, q=q, seed=seed, accuracy=(averaged,), accuracy_worker0=(averaged - 25,),
                                 bytes_per_epoch=(100 if q == 1.0 else int(100 * q),), spread=(0.0,),
                                 peak_storage_ratio=1.0, dataset_bytes=1000)

    runs = [run(j.scheme, j.q, j.seed) for j in driver.jobs(p)]
    res = driver.Results(params=p, runs=runs, check=driver.GlooCheck(max_abs_param_diff=0.0, exchange_bytes_gloo=0,
                                                                     exchange_bytes_accounted=0))
    values = driver.claims(res)
    gap = values["ls_gap_skewed"]
    assert isinstance(gap, Evidence) and list(gap.values) == [20.0, 20.0]
    assert gap.trivial == pytest.approx(100.0 / p.num_classes) and set(gap.arms) == {"GS", "LS"}
    assert res.gap("skewed", 0.0, worker0=True) == [20.0, 20.0]
    ledger = Ledger("partial-shuffle", "cpu", "/tmp")
    ledger.record_all(values)
    assert ledger.results["ls_gap_skewed"].learned is True


def test_iid_runs_only_the_two_strategies_its_claim_compares():
    p = _params()
    qs = {(j.scheme, j.q) for j in driver.jobs(p)}
    assert {q for s, q in qs if s == "iid"} == {0.0, 1.0}
    assert {q for s, q in qs if s == "skewed"} == {0.0, 1.0, *p.q_values}
