"""Out-of-core execution: swap and recompute give plain training's gradients; the two-stream model on hand-computed chains."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from repro.training.memory import Accountant, BlockProfile, DiskStore, HostStore, gradients, profile_chain, run_chain
from repro.training.ooc_sim import exhaustive, greedy, peak_memory, simulate


def _chain() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Linear(10, 32), nn.Tanh()), nn.Sequential(nn.Linear(32, 32), nn.ReLU()),
                         nn.Sequential(nn.Linear(32, 16), nn.LayerNorm(16), nn.GELU()), nn.Linear(16, 4)).double()


def _batch():
    g = torch.Generator().manual_seed(3)
    return torch.randn(8, 10, generator=g, dtype=torch.float64), torch.randint(0, 4, (8,), generator=g)


@pytest.mark.parametrize("store_kind", ["host", "disk"])
def test_every_policy_gives_the_plain_gradients(store_kind):
    model, (x, y) = _chain(), _batch()
    plain = gradients(model, x, y, ["keep"] * 4)
    for policy in itertools.product(("keep", "swap", "recompute"), repeat=4):
        store = HostStore() if store_kind == "host" else DiskStore()
        got = gradients(model, x, y, policy, store)
        for a, b in zip(plain, got):
            assert torch.equal(a, b), policy
        assert store.bytes_in == store.bytes_out  # every swapped tensor came back exactly once


def test_accountant_and_swapped_bytes_agree():
    model, (x, y) = _chain(), _batch()
    acct = Accountant(model)
    with acct.watch():
        run_chain(model, x, ["keep"] * 4, accountant=acct)
    act = acct.activation_bytes(4)
    assert all(a > 0 for a in act)
    assert any(r.is_parameter for r in acct.records)
    store = HostStore()
    nn.functional.cross_entropy(run_chain(model, x, ["swap", "keep", "swap", "keep"], store), y).backward()
    assert store.bytes_out == act[0] + act[2]
    prof = profile_chain(model.float(), x.float(), repeats=1)
    assert [p.activation_bytes * 2 for p in prof] == act  # float32 halves the float64 bytes
    assert prof[0].input_bytes == 8 * 10 * 4 and prof[0].weight_bytes == (10 * 32 + 32) * 4


def _blocks(f, b, a, i=None, w=0):
    i = i or [0] * len(f)
    return [
        BlockProfile(forward_s=fs, backward_s=bs, activation_bytes=ab, input_bytes=ib, weight_bytes=w)
        for fs, bs, ab, ib in zip(f, b, a, i)
    ]


def test_two_stream_makespan_by_hand():
    blocks = _blocks([1, 1], [2, 2], [4, 4])
    assert simulate(blocks, ["keep", "keep"], 2.0).time == 6.0
    # forward: F0 [0,1], out0 [1,3]; F1 [1,2], out1 [3,5]; backward: in1 [5,7], B1 [7,9]; in0 [7,9], B0 [9,11]
    s = simulate(blocks, ["swap", "swap"], 2.0)
    assert (s.time, s.forward_end, s.transfer_busy) == (11.0, 2.0, 8.0)
    assert simulate(blocks, ["recompute", "keep"], 2.0).time == 7.0  # B1, then F0 + B0
    # swap hidden behind compute: block 0 swapped, F1 = 3 covers out0, B1 = 3 covers in0
    hidden = _blocks([1, 3], [2, 3], [4, 4])
    assert simulate(hidden, ["swap", "keep"], 2.0).time == simulate(hidden, ["keep", "keep"], 2.0).time == 9.0
    # without overlap the transfers add up: 9 + 2 + 2
    assert simulate(hidden, ["swap", "keep"], 2.0, overlap=False).time == 13.0
    # without prefetch the swap-in waits for B1 to end: B1 [4,7], in0 [7,9], B0 [9,11]
    assert simulate(hidden, ["swap", "keep"], 2.0, prefetch=False).time == 11.0


def test_limits_and_memory():
    blocks = _blocks([1, 2, 1, 3], [2, 3, 1, 4], [5, 9, 3, 7], [1, 2, 3, 4], w=10)
    keep = simulate(blocks, ["keep"] * 4, 1.0).time
    assert simulate(blocks, ["swap"] * 4, float("inf")).time == keep  # H -> infinity: swapping is free
    assert simulate(blocks, ["keep"] * 4, 1.0).compute_busy == keep  # no recompute: no overhead
    assert peak_memory(blocks, ["swap"] * 4, prefetch=False) == 40 + 9  # weights + largest block
    assert peak_memory(blocks, ["keep"] * 4) == 40 + 24
    assert peak_memory(blocks, ["recompute"] * 4) == 40 + 10 + 9


def test_search_respects_capacity_and_greedy_is_not_worse_than_single_techniques():
    blocks = _blocks([1, 2, 1, 3, 1], [2, 3, 1, 4, 2], [5, 9, 3, 7, 6], [1, 2, 3, 4, 2], w=10)
    cap = 50 + 15  # weights of 5 blocks + 15
    best = exhaustive(blocks, 3.0, cap)
    g = greedy(blocks, 3.0, cap)
    assert best.feasible and g.feasible and g.schedule.peak_bytes <= cap
    assert best.schedule.time <= g.schedule.time
    for allowed in (("keep", "swap"), ("keep", "recompute")):
        single = exhaustive(blocks, 3.0, cap, allowed)
        assert not single.feasible or best.schedule.time <= single.schedule.time
    assert not exhaustive(blocks, 3.0, cap, ("keep", "recompute")).feasible  # recompute alone cannot fit here
    assert not greedy(blocks, 3.0, 40.0).feasible  # below the weights nothing fits
