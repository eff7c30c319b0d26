import numpy as np
import pytest
import torch

from repro.bridge import BridgeSchedule, q_sample
from repro.medical.cpdm import (
    BridgeSettings,
    MapChoice,
    attention_channel,
    attenuation_channel,
    condition_stack,
    train_segmenter,
    train_translator,
    translate,
)
from repro.medical.phantom import PhantomConfig, generate_set, hot_spot_mask, normalise_ct, normalise_pet
from repro.medical.regression import predict, train_regression
from repro.medical.unet import UNet, UNetConfig, dice_loss, load_unet, save_unet


@pytest.fixture(scope="module")
def slices():
    data = generate_set(24, PhantomConfig(shape=(1, 16, 16)), seed=0)
    return data.ct_hu[:, 0], normalise_ct(data.ct_hu[:, 0]), normalise_pet(data.pet[:, 0], 10.0)


def test_unet_shapes_and_condition_check():
    net = UNet(UNetConfig(cond_channels=2, base=4, levels=2, n_timesteps=50))
    x = torch.zeros(3, 1, 16, 16)
    assert net(x, torch.tensor([0, 10, 49]), torch.zeros(3, 2, 16, 16)).shape == (3, 1, 16, 16)
    with pytest.raises(ValueError):
        net(x, torch.tensor([0, 1, 2]), None)
    assert UNet(UNetConfig(base=4))(x).shape == (3, 1, 16, 16)


def test_dice_loss_bounds():
    target = torch.zeros(2, 1, 8, 8)
    target[:, :, 2:5, 2:5] = 1
    assert float(dice_loss(target * 40 - 20, target)) < 0.01
    assert float(dice_loss(-target * 40 + 20, target)) > 0.9


def test_bridge_endpoints_on_images():
    sched = BridgeSchedule(n_timesteps=10, m_min=0.0, m_max=1.0)
    pet, ct = torch.rand(2, 1, 8, 8), torch.rand(2, 1, 8, 8)
    x0, _ = q_sample(sched, pet, ct, torch.tensor([0, 0]))
    x1, _ = q_sample(sched, pet, ct, torch.tensor([9, 9]))
    assert torch.allclose(x0, pet) and torch.allclose(x1, ct)


def test_attenuation_channel_range(slices):
    hu, _, _ = slices
    a = attenuation_channel(hu)
    assert a.min() >= -1.0 - 1e-6 and a.max() <= 1.0 + 1e-6
    assert attenuation_channel(np.full((1, 2, 2), -1000.0)).max() == pytest.approx(1.0)


def test_condition_stack():
    att = np.zeros((4, 8, 8), np.float32)
    assert condition_stack(MapChoice(), att, att) is None
    assert condition_stack(MapChoice(attenuation=True, attention=True), att, att).shape == (4, 2, 8, 8)
    with pytest.raises(ValueError):
        condition_stack(MapChoice(attention=True), att, None)


def test_translators_train_and_sample(slices):
    hu, ct01, pet01 = slices
    plain = UNetConfig(base=4, levels=2)
    seg = train_segmenter(ct01, hot_spot_mask(pet01, 0.18), plain, epochs=1, batch_size=8, lr=1e-3, seed=0)
    attn = attention_channel(seg, ct01)
    assert set(np.unique(attn)) <= {-1.0, 1.0}
    maps = MapChoice(attenuation=True, attention=True)
    cond = condition_stack(maps, attenuation_channel(hu), attn)
    settings = BridgeSettings(schedule=BridgeSchedule(n_timesteps=20), epochs=1, batch_size=8, lr=1e-3, sample_steps=4)
    net = train_translator(maps, ct01, pet01, cond, plain, settings, seed=0)
    out = translate(net, ct01[:5], cond[:5], settings, seed=0)
    assert out.shape == (5, 16, 16) and out.min() >= 0.0 and out.max() <= 1.0
    again = translate(net, ct01[:5], cond[:5], settings, seed=0)
    assert np.array_equal(out, again)
    reg = train_regression(ct01, pet01, plain, epochs=1, batch_size=8, lr=1e-3, seed=0)
    assert predict(reg, ct01[:5]).shape == (5, 16, 16)
    with pytest.raises(ValueError):
        train_regression(ct01, pet01, UNetConfig(base=4, n_timesteps=5), epochs=1, batch_size=8, lr=1e-3, seed=0)


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    net = UNet(UNetConfig(cond_channels=1, base=4, levels=2, n_timesteps=20)).eval()
    path = save_unet(net, tmp_path / "ckpt" / "net.pt", {"seed": 3, "params": {"lr": 0.1, "seeds": (0, 1)}})
    again = load_unet(path)
    x, t, c = torch.rand(2, 1, 8, 8), torch.tensor([1, 5]), torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(net(x, t, c), again(x, t, c))
