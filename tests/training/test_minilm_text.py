"""MiniLM text arm: the generated task, and sparse, LoRA and BitFit fine-tuning of the offline MiniLM encoder."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from repro.training.chapters import gem
from repro.training.minilm_text import N_CLASSES, NEGATIVE, POSITIVE, TOPIC_NOUNS, encode, minilm_classifier, templated_task
from repro.training.sparse_ft import GradientMask, bitfit, build_masks, lora_model

MAX_TOKENS = 12


def _batch(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    train, _ = templated_task(4, 8, seed=3)
    return encode(tokenizer, train.texts, MAX_TOKENS), torch.from_numpy(train.labels)


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float = 1e-3) -> None:
    """One AdamW step (no weight decay) on the trainable parameters, with dropout seeded."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    model.train()
    torch.manual_seed(7)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _changed(model: nn.Module, before: dict[str, torch.Tensor]) -> set[str]:
    return {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}


def test_text_task_is_balanced_and_deterministic_by_seed():
    train, test = templated_task(80, 24, seed=5)
    assert np.bincount(train.labels, minlength=N_CLASSES).tolist() == [10] * N_CLASSES
    assert np.bincount(test.labels, minlength=N_CLASSES).tolist() == [3] * N_CLASSES
    again, _ = templated_task(80, 24, seed=5)
    assert again.texts == train.texts and np.array_equal(again.labels, train.labels)
    other, _ = templated_task(80, 24, seed=6)
    assert other.texts != train.texts
    # negations state the label's sentiment through the other polarity's adjective
    assert any(" not " in t for t in train.texts) and any(" not " not in t for t in train.texts)
    # training and test sentences share no topic noun and no adjective
    train_words = {w for t in train.texts for w in t.split()}
    test_words = {w for t in test.texts for w in t.split()}
    vocab = {w for nouns in TOPIC_NOUNS.values() for w in nouns} | set(POSITIVE) | set(NEGATIVE)
    assert train_words & vocab and test_words & vocab and not train_words & test_words & vocab


def test_density_one_mask_on_minilm_equals_full_fine_tuning():
    tokenizer, full = minilm_classifier(N_CLASSES, seed=0)
    _, sparse = minilm_classifier(N_CLASSES, seed=0)
    x, y = _batch(tokenizer)
    body = {n: p for n, p in sparse.named_parameters() if not n.startswith("head.")}
    masks = build_masks(body, {}, "random", "uniform", budget=sum(p.numel() for p in body.values()))
    assert all(bool(m.all()) for m in masks.values())
    GradientMask(sparse, masks)
    before = _snapshot(full)
    _step(full, x, y)
    _step(sparse, x, y)
    assert _changed(full, before)  # the step moved the model
    for (name, a), b in zip(full.named_parameters(), sparse.parameters()):
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-6, msg=name)


def test_lora_from_peft_trains_only_adapters_and_head():
    tokenizer, model = minilm_classifier(N_CLASSES, seed=1)
    x, y = _batch(tokenizer)
    targets = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n != "head"]
    lora = lora_model(model, 2, targets, ["head"])
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or ".head." in n for n in trainable)
    before = _snapshot(lora)
    _step(lora, x, y)
    changed = _changed(lora, before)
    assert changed <= trainable
    assert any("lora_B" in n for n in changed) and any(".head." in n for n in changed)


def test_bitfit_on_minilm_changes_only_biases_and_head():
    tokenizer, model = minilm_classifier(N_CLASSES, seed=2)
    x, y = _batch(tokenizer)
    n_train = bitfit(model, ["head"])
    biases = sum(p.numel() for n, p in model.named_parameters() if n.endswith("bias") and not n.startswith("head."))
    assert n_train == biases + sum(p.numel() for p in model.head.parameters())
    before = _snapshot(model)
    _step(model, x, y)
    changed = _changed(model, before)
    assert changed and all(n.endswith("bias") or n.startswith("head.") for n in changed)
    assert any(n.startswith("encoder.") for n in changed)


def test_gem_on_minilm_masks_only_the_query_and_value_weights():
    """The authors' GEM (GEM_PEFT 590f44c) masks q_proj and v_proj only; the rest of the encoder stays frozen."""
    tokenizer, model = minilm_classifier(N_CLASSES, seed=2)
    x, y = _batch(tokenizer)
    task = gem.Split(x_train=x, y_train=y, x_val=x, y_val=y, x_test=x, y_test=y)
    setup = gem.TextSetup(steps=1, batch_size=4, calibration_batches=1, lora_rank=2, head_lr=1e-3, sentences=4,
                          max_tokens=MAX_TOKENS, lr_full=3e-5, lr_sparse=1e-3)
    job = gem.FtJob(setup=setup, method="GEM", budget_percent=0.1, seed=0, lr=1e-3)
    before = _snapshot(model)
    prepared, masks = gem.prepare(model, "head", task, job, gem.MINILM_TARGETS)
    assert masks and all(n.endswith(gem.MINILM_TARGETS) for n in masks)
    total = sum(p.numel() for p in model.parameters())
    assert sum(int(m.sum()) for m in masks.values()) == round(0.001 * total)
    _step(prepared, x, y)
    changed = _changed(prepared, before)
    assert changed and all(n.endswith(gem.MINILM_TARGETS) or n.startswith("head.") for n in changed)
