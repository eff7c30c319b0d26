import numpy as np
import pytest
import torch

from repro.medical.phantom import PhantomConfig, generate_set, normalise_ct, normalise_pet
from repro.medical.report_generator import (
    ChannelScaling,
    GeneratorConfig,
    ReportGenerator,
    Vocabulary,
    generate_reports,
    load_generator,
    save_generator,
    train_generator,
)
from repro.medical.reports import render


@pytest.fixture(scope="module")
def data():
    cases = generate_set(24, PhantomConfig(shape=(8, 16, 16), max_lesions=2), seed=0)
    x = np.stack([normalise_ct(cases.ct_hu), normalise_pet(cases.pet, 10.0)], axis=1)
    reports = [render(f) for f in cases.findings]
    return x, reports


def test_channel_scaling_standardises(data):
    x, _ = data
    z = ChannelScaling.fit(x).apply(x)
    assert z.dtype == np.float32
    assert np.allclose(z.mean(axis=(0, 2, 3, 4)), 0.0, atol=1e-4)
    assert np.allclose(z.std(axis=(0, 2, 3, 4)), 1.0, atol=1e-3)


def test_generator_shapes_and_training(data):
    x, reports = data
    vocab = Vocabulary.build(reports)
    ids = vocab.encode(reports, 49)
    torch.manual_seed(0)
    model = ReportGenerator(
        GeneratorConfig(volume_shape=(8, 16, 16), vocab_size=len(vocab), channels=(4, 8, 8), hidden=32, embed=16)
    )
    logits = model(torch.from_numpy(x[:3]), torch.from_numpy(ids[:3, :-1]))
    assert logits.shape == (3, 48, len(vocab))
    losses = train_generator(model, ChannelScaling.fit(x).apply(x), ids, epochs=4, batch_size=8, lr=3e-3, seed=0)
    assert losses[-1] < losses[0]
    out = generate_reports(model, vocab, x[:5], max_len=48)
    assert len(out) == 5 and all(isinstance(r, str) for r in out)


def test_volume_sides_must_divide_by_eight():
    with pytest.raises(ValueError):
        ReportGenerator(GeneratorConfig(volume_shape=(10, 16, 16), vocab_size=10))


def test_unknown_tokens_map_to_unk():
    vocab = Vocabulary.build(["Nốt kích thước 25 mm ."])
    ids = vocab.encode(["Khối kích thước"], 6)
    assert ids[0, 1] == 3 and ids[0, 0] == 1 and ids[0, 4] == 2


def test_generator_checkpoint_round_trip(data, tmp_path):
    x, reports = data
    vocab = Vocabulary.build(reports)
    scaling = ChannelScaling.fit(x)
    torch.manual_seed(0)
    model = ReportGenerator(
        GeneratorConfig(volume_shape=(8, 16, 16), vocab_size=len(vocab), channels=(4, 8, 8), hidden=32, embed=16)
    ).eval()
    path = save_generator(model, vocab, scaling, tmp_path / "gen.pt", {"seed": 0})
    again, vocab2, scaling2 = load_generator(path)
    assert vocab2 == vocab and scaling2 == scaling
    z = scaling.apply(x[:3])
    assert generate_reports(model, vocab, z, 20) == generate_reports(again, vocab2, scaling2.apply(x[:3]), 20)
