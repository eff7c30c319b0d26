"""Seen and unseen clients for personalised FL without labels on new clients (pfl-unseen's harness).

- :class:`UnseenClientData`: an unseen client's data whose labels cannot be
  read by the method under test; touching them raises
  :class:`LabelAccessError` (the evaluation harness reads them through
  :meth:`UnseenClientData.labels_for_scoring`, after the prediction is fixed).
  A client may instead agree to label a share of its samples
  (:meth:`UnseenClientData.offer_labels`), which is what the personalised
  baselines that fine-tune on a new client need.
- :func:`seen_unseen_split`: a seeded split of client ids.
- :func:`em_label_prior`: Saerens, Latinne and Decaestecker's EM estimate of
  a new label prior from a model's posteriors on unlabelled data, and
  :func:`reweight_posteriors`, the prior-corrected posteriors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class LabelAccessError(RuntimeError):
    """Raised when code under test reads an unseen client's labels."""


@dataclass(frozen=True, kw_only=True)
class UnseenClientData:
    """An unseen client's samples; its labels are sealed.

    Attributes
    ----------
    client
        The client id.
    x
        The inputs (free to read).
    """

    client: int
    x: np.ndarray
    _sealed_y: np.ndarray

    @property
    def y(self) -> np.ndarray:
        """Always raises: an unseen client offers no labels to the method."""
        raise LabelAccessError(f"client {self.client} is unseen: its labels are not available to the method")

    def offer_labels(self, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The inputs and labels of a seeded ``share`` of the samples, which the client agrees to label.

        For the baselines that need labels from a new client (fine-tuning a head); a label-free method never
        calls it.  At least one sample is labelled.

        Raises
        ------
        ValueError
            If ``share`` is not in ``(0, 1]``.
        """
        if not 0.0 < share <= 1.0:
            raise ValueError(f"parameter 'share': must be in (0, 1], got {share}")
        n = len(self._sealed_y)
        pick = np.sort(np.random.default_rng(seed).choice(n, size=max(1, round(share * n)), replace=False))
        return self.x[pick], self._sealed_y[pick]

    def labels_for_scoring(self, predictions: np.ndarray) -> float:
        """Accuracy (percent) of fixed ``predictions`` on this client, for the evaluation harness only."""
        predictions = np.asarray(predictions)
        if predictions.shape != self._sealed_y.shape:
            raise ValueError(f"{predictions.shape[0]} predictions for {self._sealed_y.shape[0]} samples")
        return float(100.0 * np.mean(predictions == self._sealed_y))


def seen_unseen_split(num_clients: int, unseen: int, seed: int) -> tuple[list[int], list[int]]:
    """Seeded split of client ids into ``(seen, unseen)``, both sorted."""
    if not 0 < unseen < num_clients:
        raise ValueError(f"unseen must be in 1..{num_clients - 1}, got {unseen}")
    order = np.random.default_rng(seed).permutation(num_clients)
    return sorted(int(c) for c in order[unseen:]), sorted(int(c) for c in order[:unseen])


def reweight_posteriors(posteriors: np.ndarray, train_prior: np.ndarray, new_prior: np.ndarray) -> np.ndarray:
    """Posteriors corrected from ``train_prior`` to ``new_prior`` (Bayes' rule, rows renormalised)."""
    w = np.asarray(posteriors) * (np.asarray(new_prior) / np.asarray(train_prior))
    return w / w.sum(axis=1, keepdims=True)


def em_label_prior(posteriors: np.ndarray, train_prior: np.ndarray, iterations: int = 100,
                   tol: float = 1e-8) -> np.ndarray:
    """EM estimate of the label prior of unlabelled data from a model's posteriors (Saerens et al., 2002).

    Parameters
    ----------
    posteriors
        ``(samples, classes)`` posteriors of a model trained under ``train_prior``.
    train_prior
        The training label prior.
    iterations, tol
        Stop after this many iterations or when the prior moves less than ``tol`` (L1).
    """
    prior = np.asarray(train_prior, dtype=np.float64)
    for _ in range(iterations):
        new = reweight_posteriors(posteriors, train_prior, prior).mean(axis=0)
        done = np.abs(new - prior).sum() < tol
        prior = new
        if done:
            break
    return prior
