"""Brownian-bridge diffusion: schedule, forward marginals, CFG, deterministic sampling, training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from repro.bridge import (
    BridgeSampling,
    BridgeSchedule,
    BridgeTraining,
    MLPDenoiser,
    bridge_marginal,
    bridge_sample,
    drop_condition,
    guided_prediction,
    q_sample,
    sampling_steps,
    train_bridge,
)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def seeded(factory, seed: int):
    """Build a module with torch's global RNG seeded, restoring the RNG after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def test_schedule_variance_is_nonnegative_and_peaks_at_half() -> None:
    s = BridgeSchedule(n_timesteps=1000, max_var=1.0)
    m, var = s.m, s.var
    assert m[0] == pytest.approx(0.001) and m[-1] == pytest.approx(0.999)
    assert torch.all(var >= 0)
    torch.testing.assert_close(var, 2 * 1.0 * (m - m * m))
    assert abs(float(m[int(torch.argmax(var))]) - 0.5) < 1e-3
    assert float(var.max()) <= 0.5 + 1e-12
    with pytest.raises(ValueError, match="m_min"):
        BridgeSchedule(m_min=0.5, m_max=0.4)


def test_marginal_endpoints_are_exact() -> None:
    g = torch.Generator().manual_seed(0)
    xt, xs, noise = (torch.randn(5, 3, generator=g) for _ in range(3))
    assert torch.equal(bridge_marginal(xt, xs, torch.zeros(5), torch.zeros(5), noise), xt)
    assert torch.equal(bridge_marginal(xt, xs, torch.ones(5), torch.zeros(5), noise), xs)
    # with m from 0 to 1, the forward bridge hits x_target at t=0 and x_source at t=T-1, noise or not
    s = BridgeSchedule(n_timesteps=50, m_min=0.0, m_max=1.0)
    x0, o0 = q_sample(s, xt, xs, torch.zeros(5, dtype=torch.long), noise=noise)
    x1, _ = q_sample(s, xt, xs, torch.full((5,), 49), noise=noise)
    assert torch.equal(x0, xt) and torch.equal(o0, torch.zeros_like(xt)) and torch.equal(x1, xs)
    with pytest.raises(ValueError, match="t must"):
        q_sample(s, xt, xs, torch.full((5,), 50))


def test_forward_marginal_moments() -> None:
    s = BridgeSchedule(n_timesteps=100)
    n = 20000
    xt, xs = torch.full((n, 1), -1.0, dtype=torch.float64), torch.full((n, 1), 3.0, dtype=torch.float64)
    t = torch.full((n,), 40)
    x, obj = q_sample(s, xt, xs, t, generator=torch.Generator().manual_seed(1))
    m, v = float(s.m[40]), float(s.var[40])
    assert float(x.mean()) == pytest.approx((1 - m) * -1.0 + m * 3.0, abs=0.02)
    assert float(x.var()) == pytest.approx(v, rel=0.05)
    torch.testing.assert_close(obj, x - xt)  # the "grad" objective


def _denoiser(dim: int = 2, cond_dim: int = 1, seed: int = 0) -> MLPDenoiser:
    return seeded(lambda: MLPDenoiser(dim, cond_dim, hidden=(32, 32), n_timesteps=100), seed)


def test_sampler_is_deterministic_at_eta_zero() -> None:
    den = _denoiser()
    s = BridgeSchedule(n_timesteps=100)
    xs, c = torch.randn(8, 2), torch.randn(8, 1)
    a = bridge_sample(den, xs, c, BridgeSampling(schedule=s, n_steps=20, eta=0.0, guidance=-1.5, seed=1))
    b = bridge_sample(den, xs, c, BridgeSampling(schedule=s, n_steps=20, eta=0.0, guidance=-1.5, seed=2))
    assert torch.equal(a, b)
    n1 = bridge_sample(den, xs, c, BridgeSampling(schedule=s, n_steps=20, eta=0.5, seed=1))
    n2 = bridge_sample(den, xs, c, BridgeSampling(schedule=s, n_steps=20, eta=0.5, seed=2))
    again = bridge_sample(den, xs, c, BridgeSampling(schedule=s, n_steps=20, eta=0.5, seed=1))
    assert not torch.equal(n1, n2) and torch.equal(n1, again)


def test_cfg_with_zero_weight_is_the_conditional_prediction() -> None:
    den = _denoiser()
    x, t, c = torch.randn(4, 2), torch.tensor([0, 10, 50, 99]), torch.randn(4, 1)
    with torch.no_grad():
        cond = den(x, t, c)
        uncond = den(x, t, torch.zeros_like(c))
    assert torch.equal(guided_prediction(den, x, t, c, 0.0), cond)
    torch.testing.assert_close(guided_prediction(den, x, t, c, -1.5), -0.5 * cond + 1.5 * uncond)


def test_condition_dropout() -> None:
    c = torch.randn(100, 2)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(drop_condition(c, 0.0, g), c)
    assert torch.equal(drop_condition(c, 1.0, g), torch.zeros_like(c))
    half = drop_condition(c, 0.5, g)
    dropped = (half == 0).all(1)
    assert 30 < int(dropped.sum()) < 70 and torch.equal(half[~dropped], c[~dropped])


def test_sampling_steps_run_down_to_zero() -> None:
    st = sampling_steps(1000, 200)
    assert st[0] == 999 and st[-1] == 0 and all(a > b for a, b in zip(st, st[1:]))
    assert len(sampling_steps(10, 50)) == 10


def test_a_trained_bridge_translates_source_to_target() -> None:
    """Pairs x_target = x_source + (2, -1).

    A denoiser that sees the source (here through ``cond``) learns the pairing:
    each sampled target lands near its own source + shift.  One that does not
    (constant ``cond``) still maps the source *distribution* onto the target
    distribution: the samples are centred on the shifted mean.
    """
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(256, 2, generator=g)
    shift = torch.tensor([2.0, -1.0])
    s = BridgeSchedule(n_timesteps=100)
    kw = dict(schedule=s, epochs=40, batch_size=64, lr=3e-3, loss="l2", ema_decay=None, seed=0)
    paired = train_bridge(_denoiser(cond_dim=2, seed=3), xs, xs + shift, xs, BridgeTraining(p_uncond=0.0, **kw))
    assert paired.history[-1]["loss"] < 0.5 * paired.history[0]["loss"]
    x_new = torch.randn(64, 2, generator=g) * 0.5
    out = bridge_sample(paired.model, x_new, x_new, BridgeSampling(schedule=s, n_steps=25, eta=0.0))
    assert float((out - x_new - shift).norm(dim=1).mean()) < 0.3  # vs |shift| = 2.24 for doing nothing
    blind = train_bridge(_denoiser(cond_dim=1, seed=3), xs, xs + shift, torch.ones(256, 1), BridgeTraining(**kw))
    x_new = torch.randn(256, 2, generator=g)
    out = bridge_sample(blind.model, x_new, torch.ones(256, 1), BridgeSampling(schedule=s, n_steps=25, eta=0.0))
    assert float((out.mean(0) - x_new.mean(0) - shift).norm()) < 0.4


class _ConvDenoiser(nn.Module):
    """A stand-in image denoiser: proves the bridge is shape-agnostic."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 1, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor | None) -> torch.Tensor:
        tmap = (t.float() / 100)[:, None, None, None].expand_as(x)
        return self.conv(torch.cat([x, tmap], dim=1))


def test_bridge_is_shape_agnostic_with_a_pluggable_denoiser() -> None:
    g = torch.Generator().manual_seed(0)
    ct, pet = torch.randn(12, 1, 6, 6, generator=g), torch.randn(12, 1, 6, 6, generator=g)
    s = BridgeSchedule(n_timesteps=100)
    den = seeded(_ConvDenoiser, 0)
    res = train_bridge(den, ct, pet, None, BridgeTraining(schedule=s, epochs=2, batch_size=4, seed=0))
    out = bridge_sample(res.ema_model, ct, None, BridgeSampling(schedule=s, n_steps=10, eta=0.0))
    assert out.shape == ct.shape and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="same shape"):
        train_bridge(den, ct, pet[:, :, :5], None, BridgeTraining(schedule=s, epochs=1))


def test_training_is_reproducible_by_seed() -> None:
    xs = torch.randn(64, 2, generator=torch.Generator().manual_seed(5))
    kw = dict(schedule=BridgeSchedule(n_timesteps=100), epochs=2, batch_size=16, seed=4)
    a = train_bridge(_denoiser(seed=1), xs, xs + 1, torch.ones(64, 1), BridgeTraining(**kw))
    b = train_bridge(_denoiser(seed=1), xs, xs + 1, torch.ones(64, 1), BridgeTraining(**kw))
    assert all(torch.equal(p, q) for p, q in zip(a.ema_model.parameters(), b.ema_model.parameters()))


def test_pairs_for_epoch_feeds_each_later_epoch_its_own_pairs() -> None:
    g = torch.Generator().manual_seed(0)
    xs, xt, c = torch.randn(40, 2, generator=g), torch.randn(40, 2, generator=g), torch.randn(40, 1, generator=g)
    kw = dict(schedule=BridgeSchedule(n_timesteps=50), epochs=3, batch_size=16, ema_decay=None, seed=4)
    fixed = train_bridge(_denoiser(seed=1), xs, xt, c, BridgeTraining(**kw))
    asked: list[int] = []

    def same_pairs(epoch: int):
        asked.append(epoch)
        return xs, xt, c

    # handing back the same pairs every epoch reproduces training on fixed pairs exactly
    again = train_bridge(_denoiser(seed=1), xs, xt, c, BridgeTraining(**kw), pairs_for_epoch=same_pairs)
    assert asked == [1, 2]
    for p, q in zip(fixed.model.parameters(), again.model.parameters()):
        assert torch.equal(p, q)
    # fresh pairs (of another size) change the model; epoch 0 still trains on the pairs passed in
    fresh = train_bridge(_denoiser(seed=1), xs, xt, c, BridgeTraining(**kw),
                         pairs_for_epoch=lambda e: (xs[: 20 + e], xt[: 20 + e] + 1.0, c[: 20 + e]))
    assert fresh.history[0] == fixed.history[0]
    assert not all(torch.equal(p, q) for p, q in zip(fixed.model.parameters(), fresh.model.parameters()))
    with pytest.raises(ValueError, match="cond must have"):
        train_bridge(_denoiser(seed=1), xs, xt, c, BridgeTraining(**kw), pairs_for_epoch=lambda e: (xs, xt, c[:5]))
