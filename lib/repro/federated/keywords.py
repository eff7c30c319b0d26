"""The federated keyword-spotting task of the fedaudio chapter: speakers as clients, log-mel CNN.

:class:`KeywordTask` fixes everything a run trains on; :func:`keyword_data`
builds it once per process: every speaker (one client) says keyword-like
clips (:func:`repro.federated.audio.keyword_clip`) with a class mix drawn
from a Dirichlet distribution, optionally recorded at a target SNR
(:func:`repro.federated.audio.add_noise`, training and test clips alike) and
with per-client label noise on the training labels
(:mod:`repro.federated.label_noise`).  Features are log-mel spectrograms
from librosa.  The test set pools held-out clips of every speaker, an equal
number of each class, with clean labels; a validation set (``valid_clips``
per speaker, drawn apart from the training and test clips, recorded at the
same SNR, clean labels) is what tuning reads, so the test set is never used
to choose a setting.

:func:`make_keyword_client_app` is the Flower ``ClientApp``: plain local SGD
with the settings of :class:`~repro.federated.client.LocalSettings` (message
config first, then run config), so any Flower strategy drives it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp import ClientApp

from repro.federated.arrays import from_arrayrecord, to_arrayrecord
from repro.federated.audio import KEYWORD_CLASSES, Speaker, add_noise, keyword_clip, log_mel_batch
from repro.federated.client import RunConfig, client_app_with, finish_round, own_model_round, train_locally
from repro.federated.label_noise import noisy_labels, transition_matrix
from repro.federated.task import evaluate_on
from repro.models import get_weights, set_weights

N_MELS = 32
FRAMES = 32
TOP_DB_SCALE = 40.0
"""Features are ``dB / 40 + 1``: the spectrogram's 80 dB range mapped to [-1, 1]."""


@dataclass(frozen=True, kw_only=True)
class KeywordTask:
    """One federation of speakers and the recording conditions.

    Attributes
    ----------
    num_speakers
        Speakers, one per client.
    train_clips, test_clips
        Clips per speaker for training and for the pooled test set.
    valid_clips
        Clips per speaker for the pooled validation set (0: none); adding them leaves every other clip unchanged.
    imbalance
        Dirichlet concentration of each speaker's class mix (small: few classes per speaker).
    snr
        SNR (dB) of the additive Gaussian noise on every clip; ``None``: clean.
    label_noise
        ``eps`` of each client's label-noise transition matrix (0: clean labels).
    seed
        Seed of the speakers, clips, noise and label noise.
    """

    num_speakers: int = 20
    train_clips: int = 32
    test_clips: int = 8
    imbalance: float = 1.0
    snr: float | None = None
    label_noise: float = 0.0
    seed: int = 0
    valid_clips: int = 0

    def clean(self) -> KeywordTask:
        """The same speakers and clips without noise of either kind."""
        return replace(self, snr=None, label_noise=0.0)


@dataclass(frozen=True, kw_only=True)
class KeywordData:
    """The features and labels of a :class:`KeywordTask`.

    Attributes
    ----------
    x_train, y_train
        Per speaker: features ``(clips, N_MELS * FRAMES)`` and the (possibly noisy) training labels.
    true_train
        Per speaker: the training labels before label noise.
    x_test, y_test
        The pooled test set (clean labels).
    x_valid, y_valid
        The pooled validation set (clean labels; empty when the task has no ``valid_clips``).
    """

    x_train: tuple[np.ndarray, ...]
    y_train: tuple[np.ndarray, ...]
    true_train: tuple[np.ndarray, ...]
    x_test: np.ndarray
    y_test: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray

    @property
    def label_noise_rate(self) -> float:
        """Share of training labels that label noise changed."""
        changed = sum(int((a != b).sum()) for a, b in zip(self.y_train, self.true_train))
        return changed / sum(len(y) for y in self.true_train)


def _seed(task: KeywordTask, *path: int) -> int:
    return int(np.random.SeedSequence([task.seed, *path]).generate_state(1)[0])


@dataclass(frozen=True, kw_only=True)
class _Clips:
    """Raw clips and labels of every speaker, stacked per split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray


@functools.lru_cache(maxsize=4)
def _clips(task: KeywordTask) -> _Clips:
    """Raw clips and labels of every speaker (validation clips from seed streams of their own)."""
    classes = len(KEYWORD_CLASSES)
    xs, ys, xt, yt, xv, yv = [], [], [], [], [], []
    for s in range(task.num_speakers):
        speaker = Speaker.draw(_seed(task, 0, s))
        rng = np.random.default_rng(_seed(task, 1, s))
        mix = rng.dirichlet(np.full(classes, task.imbalance))
        train = rng.choice(classes, size=task.train_clips, p=mix)
        test = np.arange(task.test_clips) % classes
        xs += [keyword_clip(int(c), speaker, _seed(task, 2, s, i)) for i, c in enumerate(train)]
        xt += [keyword_clip(int(c), speaker, _seed(task, 3, s, i)) for i, c in enumerate(test)]
        valid = np.arange(task.valid_clips) % classes
        xv += [keyword_clip(int(c), speaker, _seed(task, 8, s, i)) for i, c in enumerate(valid)]
        ys.append(train)
        yt.append(test)
        yv.append(valid)
    x_valid = np.stack(xv) if xv else np.zeros((0, *xt[0].shape), dtype=xt[0].dtype)
    return _Clips(
        x_train=np.stack(xs),
        y_train=np.concatenate(ys),
        x_test=np.stack(xt),
        y_test=np.concatenate(yt),
        x_valid=x_valid,
        y_valid=np.concatenate(yv),
    )


def _features(clips: np.ndarray, snr: float | None, stream: int, task: KeywordTask) -> np.ndarray:
    if len(clips) == 0:
        return np.zeros((0, N_MELS * FRAMES), dtype=np.float32)
    if snr is not None:
        clips = np.stack([add_noise(c, snr, seed=_seed(task, stream, i)) for i, c in enumerate(clips)])
    db = log_mel_batch(clips, n_mels=N_MELS, frames=FRAMES)
    return (db / TOP_DB_SCALE + 1.0).reshape(len(clips), -1).astype(np.float32)


@functools.lru_cache(maxsize=8)
def keyword_data(task: KeywordTask) -> KeywordData:
    """Build (once per process) the features and labels of ``task``."""
    clips = _clips(task.clean())
    f_train = _features(clips.x_train, task.snr, 4, task)
    f_test = _features(clips.x_test, task.snr, 5, task)
    f_valid = _features(clips.x_valid, task.snr, 9, task)
    per = task.train_clips
    y_true = clips.y_train.astype(np.int64)
    true = tuple(y_true[s * per : (s + 1) * per] for s in range(task.num_speakers))
    noisy = tuple(
        noisy_labels(y, transition_matrix(len(KEYWORD_CLASSES), task.label_noise, seed=_seed(task, 6, s)), seed=_seed(task, 7, s))
        for s, y in enumerate(true)
    )
    return KeywordData(
        x_train=tuple(f_train[s * per : (s + 1) * per] for s in range(task.num_speakers)),
        y_train=noisy,
        true_train=true,
        x_test=f_test,
        y_test=clips.y_test.astype(np.int64),
        x_valid=f_valid,
        y_valid=clips.y_valid.astype(np.int64),
    )


def keyword_cnn(seed: int) -> torch.nn.Module:
    """Two convolution blocks (8 and 16 channels, 3x3, max-pool 2) and a linear classifier on the log-mel image."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, N_MELS, FRAMES)),
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * (N_MELS // 4) * (FRAMES // 4), len(KEYWORD_CLASSES)),
    )


@functools.lru_cache(maxsize=1)
def _work_model() -> torch.nn.Module:
    return keyword_cnn(seed=0)


def keyword_initial(seed: int) -> ArrayRecord:
    """The initial global model of a run with ``seed``."""
    return to_arrayrecord(get_weights(keyword_cnn(seed)))


def keyword_evaluator(task: KeywordTask, split: str = "test"):
    """A function evaluating a global model on the task's pooled ``test`` or ``validation`` set (accuracy in percent, loss).

    Raises
    ------
    ValueError
        If ``split`` is neither, or is ``validation`` for a task without ``valid_clips``.
    """
    if split not in ("test", "validation"):
        raise ValueError(f"parameter 'split': must be 'test' or 'validation', got {split!r}")
    if split == "validation" and task.valid_clips < 1:
        raise ValueError("parameter 'split': the task has no validation clips (valid_clips = 0)")
    model = keyword_cnn(seed=0)

    def evaluate_global(arrays: ArrayRecord) -> dict[str, float]:
        data = keyword_data(task)
        set_weights(model, from_arrayrecord(arrays))
        if split == "validation":
            return evaluate_on(model, data.x_valid, data.y_valid)
        return evaluate_on(model, data.x_test, data.y_test)

    return evaluate_global


def train_keywords(task: KeywordTask, msg: Message, context: Context) -> Message:
    """One client's round: load the received model, run local SGD on the speaker's clips, reply with the model."""
    data = keyword_data(task)

    def speaker(pid: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= pid < task.num_speakers:
            raise ValueError(f"partition-id {pid} outside 0..{task.num_speakers - 1}")
        return data.x_train[pid], data.y_train[pid]

    model = _work_model()
    rnd = own_model_round(model, msg, context, speaker)
    loss = train_locally(model, rnd.x, rnd.y, rnd.settings)
    return finish_round(msg, rnd, get_weights(model), loss)


def make_keyword_client_app(task: KeywordTask, run_config: RunConfig | None = None) -> ClientApp:
    """The ``ClientApp`` of ``task`` (see :func:`repro.federated.client.client_app_with` for ``run_config``)."""
    return client_app_with(lambda msg, context: train_keywords(task, msg, context), run_config)
