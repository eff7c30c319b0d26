"""Templated visual question answering over the phantoms: yes/no questions and a head that answers them.

ViMed-PET's second benchmark asks vision-language models multi-turn questions
about each volume (which body part, abnormal findings, FDG uptake, lymph
nodes).  Its question set is not available here, so this module asks a fixed
set of Vietnamese yes/no questions whose answers follow from a case's
structured findings (:data:`QUESTIONS`), and answers them with a linear head
on a report generator's frozen image features (:func:`train_qa_head`): one
logit per question.  The trivial answerer gives each question the majority
answer of the training cases (:func:`majority_accuracy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from repro.medical.phantom import SITES, Findings

SITE_WORDS = {
    "right_lung": "phổi phải",
    "left_lung": "phổi trái",
    "liver": "gan",
    "bone": "xương",
    "mediastinal_node": "hạch trung thất",
}
"""How a question names each lesion site."""


@dataclass(frozen=True, kw_only=True)
class Question:
    """One yes/no question and how its answer follows from a case's findings.

    Attributes
    ----------
    id
        A short name, for tables.
    text
        The question, in Vietnamese.
    answer
        ``findings -> True`` (yes) or ``False`` (no).
    """

    id: str
    text: str
    answer: Callable[[Findings], bool]


def _site_question(site: str) -> Question:
    return Question(id=f"lesion_{site}", text=f"Có tổn thương ở {SITE_WORDS[site]} không?",
                    answer=lambda f: any(les.site == site for les in f.lesions))


QUESTIONS: tuple[Question, ...] = (
    Question(id="any_lesion", text="Có tổn thương khu trú không?", answer=lambda f: len(f.lesions) > 0),
    Question(id="fdg_avid", text="Có tổn thương tăng chuyển hóa FDG không?",
             answer=lambda f: any(les.fdg_avid for les in f.lesions)),
    Question(id="mass", text="Có khối (không phải nốt) không?", answer=lambda f: any(les.kind == "mass" for les in f.lesions)),
    *(_site_question(site) for site in SITES),
)
"""The questions asked of every volume."""


def answers(findings: Sequence[Findings]) -> np.ndarray:
    """The true answers ``(n, len(QUESTIONS))``, 1.0 for yes and 0.0 for no."""
    return np.array([[float(q.answer(f)) for q in QUESTIONS] for f in findings], dtype=np.float32)


def train_qa_head(features: torch.Tensor, targets: np.ndarray, *, steps: int = 300, lr: float = 1e-2,
                  seed: int = 0) -> nn.Linear:
    """Fit one logistic output per question on frozen features (full-batch Adam, binary cross-entropy).

    Parameters
    ----------
    features
        Image features ``(n, F)`` (detached).
    targets
        :func:`answers` of the same cases.
    steps, lr
        Optimisation settings.
    seed
        Seed of the head's initial weights.

    Returns
    -------
    nn.Linear
        The head: features to one logit per question.
    """
    torch.manual_seed(int(seed))
    head = nn.Linear(features.shape[1], targets.shape[1])
    y = torch.as_tensor(targets)
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    for _ in range(steps):
        loss = nn.functional.binary_cross_entropy_with_logits(head(features), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return head.eval()


@torch.no_grad()
def qa_accuracy(head: nn.Linear, features: torch.Tensor, targets: np.ndarray) -> np.ndarray:
    """Per question, the share of cases answered right (a logit above 0 is a yes)."""
    predicted = (head(features) > 0).numpy().astype(np.float32)
    return np.asarray((predicted == targets).mean(axis=0), dtype=np.float64)


def majority_accuracy(train_targets: np.ndarray, test_targets: np.ndarray) -> np.ndarray:
    """Per question, the test accuracy of answering every case with the training cases' majority answer."""
    majority = (train_targets.mean(axis=0) >= 0.5).astype(np.float32)
    return np.asarray((test_targets == majority).mean(axis=0), dtype=np.float64)
