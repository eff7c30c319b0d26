"""FedDCT's ensemble, co-training loss, warm-up and clustering."""

from __future__ import annotations

import copy

import numpy as np
import torch

from repro.federated.chapters import feddct as chapter
from repro.federated.client import LocalSGD, make_client_app
from repro.federated.engine import central_evaluator, initial_arrays, run_federated, snapshot
from repro.federated.feddct import (
    CoTrainedEnsemble,
    FedDCT,
    build_ensemble,
    co_training_loss,
    cot_weight,
    ensemble_arrays,
    ensemble_evaluator,
    js_divergence,
    make_feddct_client_app,
    random_clusters,
    sub_width,
)
from repro.federated.strategies import SeededFedAvg
from repro.federated.task import TaskSpec
from repro.models import mlp


def test_js_is_nonnegative_and_zero_for_identical_members():
    torch.manual_seed(0)
    z = torch.randn(8, 5)
    assert abs(js_divergence([z, z.clone(), z.clone()]).item()) < 1e-6
    for _ in range(5):
        assert js_divergence([torch.randn(8, 5) for _ in range(3)]).item() >= 0


def test_ensemble_output_is_mean_of_member_logits():
    torch.manual_seed(1)
    members = [mlp(4, [6], 3) for _ in range(4)]
    ens, x = CoTrainedEnsemble(members), torch.randn(5, 4)
    torch.testing.assert_close(ens(x), sum(m(x) for m in members) / 4)


def test_one_member_loss_is_cross_entropy():
    torch.manual_seed(2)
    z, y = torch.randn(6, 3), torch.randint(0, 3, (6,))
    torch.testing.assert_close(co_training_loss([z], y, weight=0.5), torch.nn.functional.cross_entropy(z, y))


def test_one_member_training_equals_plain_sgd():
    torch.manual_seed(3)
    model = mlp(4, [6], 3)
    ens = CoTrainedEnsemble([copy.deepcopy(model)])
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    for net, loss_fn in ((model, lambda: torch.nn.functional.cross_entropy(model(x), y)),
                         (ens, lambda: co_training_loss(ens.member_logits(x), y, cot_weight(0)))):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    for a, b in zip(model.parameters(), ens.members[0].parameters()):
        torch.testing.assert_close(a, b)


def test_warmup_and_clusters():
    assert cot_weight(0) == 0.005 and cot_weight(20) == 0.25 and cot_weight(100) == 0.5
    clusters = random_clusters(list(range(10)), 4, seed=0)
    assert len(clusters) == 2 and all(len(c) == 4 for c in clusters)
    assert len({c for cl in clusters for c in cl}) == 8
    assert sub_width(256, 4) == 128


# ----- FedDCT's Flower rounds ------------------------------------------------------------------
SPEC = TaskSpec(dataset="digits", num_clients=8, scheme="iid", hidden=(32, 16), n_train=400)
LOCAL = LocalSGD(batch_size=16, lr=0.05, momentum=0.9).config(3)


def run_weights(strategy, app, init, evaluator, rounds: int = 3) -> dict[str, np.ndarray]:
    hist = run_federated(strategy, app, SPEC.num_clients, init, rounds, evaluator, [rounds])
    return snapshot(hist.final_arrays)


def test_split_factor_one_is_fedavg_on_that_model():
    fedavg = run_weights(SeededFedAvg(SPEC.num_clients, LOCAL, seed=2), make_client_app(SPEC, {"seed": 2}),
                         initial_arrays(SPEC, 2), central_evaluator(SPEC))
    dct = run_weights(FedDCT(SPEC.num_clients, LOCAL, split_factor=1, seed=2),
                      make_feddct_client_app(SPEC, 1, {"seed": 2}), ensemble_arrays(SPEC, 1, 2),
                      ensemble_evaluator(SPEC, 1))
    assert sorted(dct) == sorted(f"members.0.{k}" for k in fedavg)
    for k in fedavg:
        np.testing.assert_array_equal(fedavg[k], dct[f"members.0.{k}"])


def test_clusters_train_the_ensemble_and_move_one_sub_model_per_device():
    strategy = FedDCT(SPEC.num_clients, LOCAL, split_factor=4, seed=0, cot_warmup=2)
    init = ensemble_arrays(SPEC, 4, 0)
    after = run_weights(strategy, make_feddct_client_app(SPEC, 4, {"seed": 0}), init, ensemble_evaluator(SPEC, 4),
                        rounds=2)
    assert all(len(cl) == 4 for cls in strategy.clusters.values() for cl in cls) and len(strategy.clusters[1]) == 2
    assert all(not np.array_equal(after[k], init[k].numpy()) for k in after)  # every sub-model trained
    size = sum(v.numpy().size for v in init.values())
    # per round: 2 clusters x 4 devices, each downloading and uploading one quarter of the ensemble
    assert strategy.comm.total == 2 * 2 * 2 * size
    widths = [m.fc0.out_features for m in build_ensemble(SPEC, 4, 0).members]
    assert widths == [sub_width(32, 4)] * 4


def test_fedgkt_device_holds_one_sub_model_and_its_server_the_large_widths():
    """The chapter's FedGKT device trains exactly one FedDCT sub-model's MLP; the memory table says so."""
    spec = TaskSpec(dataset="digits", num_clients=8, scheme="iid", hidden=(64, 64), n_train=400)
    task = chapter.gkt_task(spec, split_factor=4)
    sub = build_ensemble(spec, 4, seed=0).members[0]
    assert [tuple(p.shape) for p in task.client_model(0).parameters()] == [tuple(p.shape) for p in sub.parameters()]
    assert task.server_model(0).fc0.in_features == sub_width(64, 4) and task.server_hidden == (64, 64)
    memory = chapter.per_device_memory(spec, 4, batch_size=32)
    gkt_row = memory[memory.device.str.startswith("FedGKT")]
    assert len(gkt_row) == 1
    assert chapter.device_memory(memory, "fedgkt").equals(gkt_row.iloc[0])
    assert gkt_row["step memory, model (kB)"].iloc[0] == chapter.device_memory(memory, "feddct")["step memory, model (kB)"]
