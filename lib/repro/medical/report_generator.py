"""A tiny report generator: 3D-CNN encoder over CT/PET volumes and a GRU decoder.

Stands in for ViMed-PET's vision-language models (a 3D vision encoder, a
projector and an LLM).  The encoder is three strided 3D convolutions over the
two-channel volume ``(CT, PET)``; its flattened feature map (which keeps where
in the body a finding is) and its per-channel maximum (a hot spot anywhere)
are projected to the decoder's initial state and
also fed at every step.  The decoder is a one-layer GRU over a word-level
vocabulary built from the training reports, trained with teacher forcing and
cross-entropy, and decoded greedily.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from repro.medical.reports import detokenize, tokenize
from repro.medical.runs import save_network

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


@dataclass(frozen=True, kw_only=True)
class Vocabulary:
    """Word-level vocabulary; ids 0-3 are ``<pad> <bos> <eos> <unk>``.

    Attributes
    ----------
    tokens
        All tokens, the four specials first.
    """

    tokens: tuple[str, ...]

    @classmethod
    def build(cls, reports: list[str]) -> "Vocabulary":
        """Collect the tokens of ``reports`` (sorted, after the specials)."""
        words = sorted({t for r in reports for t in tokenize(r)})
        return cls(tokens=(PAD, BOS, EOS, UNK, *words))

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, reports: list[str], length: int) -> np.ndarray:
        """Token ids ``(n, length)``: ``<bos> words <eos>`` padded (or cut) to ``length``."""
        index = {t: i for i, t in enumerate(self.tokens)}
        out = np.zeros((len(reports), length), dtype=np.int64)
        for row, report in enumerate(reports):
            ids = [1, *(index.get(t, 3) for t in tokenize(report)), 2][:length]
            out[row, : len(ids)] = ids
        return out

    def decode(self, ids: np.ndarray) -> str:
        """Text of one id sequence, stopping at ``<eos>`` and skipping the specials."""
        words = []
        for i in ids:
            if int(i) == 2:
                break
            if int(i) > 3:
                words.append(self.tokens[int(i)])
        return detokenize(words)


@dataclass(frozen=True, kw_only=True)
class ChannelScaling:
    """Per-channel standardisation of the input volumes, fitted on the training set.

    The PET channel is small and sparse after normalisation (mean about 0.03);
    without standardisation the encoder did not pick up hot spots within the
    cpu budget (measured).

    Attributes
    ----------
    mean, std
        One value per channel.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def fit(cls, volumes: np.ndarray) -> "ChannelScaling":
        """Channel means and standard deviations of ``(n, C, D, H, W)`` volumes."""
        axes = (0, *range(2, volumes.ndim))
        return cls(mean=tuple(volumes.mean(axis=axes).tolist()), std=tuple(np.maximum(volumes.std(axis=axes), 1e-6).tolist()))

    def apply(self, volumes: np.ndarray) -> np.ndarray:
        """Standardised float32 copy of ``volumes``."""
        shape = (1, -1) + (1,) * (volumes.ndim - 2)
        return ((volumes - np.reshape(self.mean, shape)) / np.reshape(self.std, shape)).astype(np.float32)


@dataclass(frozen=True, kw_only=True)
class GeneratorConfig:
    """Sizes of a :class:`ReportGenerator`.

    Attributes
    ----------
    volume_shape
        ``(D, H, W)``, each divisible by 8.
    vocab_size
        Tokens in the vocabulary.
    channels
        Widths of the three encoder convolutions.
    hidden
        GRU state and image-feature width.
    embed
        Token embedding width.
    """

    volume_shape: tuple[int, int, int]
    vocab_size: int
    channels: tuple[int, int, int] = (8, 16, 32)
    hidden: int = 128
    embed: int = 64


class ReportGenerator(nn.Module):
    """3D-CNN encoder plus GRU decoder (see the module docstring).

    Parameters
    ----------
    config
        The network's sizes.
    """

    def __init__(self, config: GeneratorConfig) -> None:
        super().__init__()
        if any(s % 8 for s in config.volume_shape):
            raise ValueError(f"volume sides must be divisible by 8, got {config.volume_shape}")
        self.config = config
        c1, c2, c3 = config.channels
        self.encoder = nn.Sequential(
            nn.Conv3d(2, c1, 3, stride=2, padding=1), nn.GroupNorm(min(4, c1), c1), nn.SiLU(),
            nn.Conv3d(c1, c2, 3, stride=2, padding=1), nn.GroupNorm(min(4, c2), c2), nn.SiLU(),
            nn.Conv3d(c2, c3, 3, stride=2, padding=1), nn.GroupNorm(min(4, c3), c3), nn.SiLU(),
        )
        n_feat = c3 * int(np.prod([s // 8 for s in config.volume_shape])) + c3
        self.project = nn.Linear(n_feat, config.hidden)
        self.embed = nn.Embedding(config.vocab_size, config.embed, padding_idx=0)
        self.gru = nn.GRU(config.embed + config.hidden, config.hidden, batch_first=True)
        self.out = nn.Linear(config.hidden, config.vocab_size)

    def encode(self, volumes: torch.Tensor) -> torch.Tensor:
        """Image features ``(B, hidden)`` of volumes ``(B, 2, D, H, W)``."""
        fmap = self.encoder(volumes)
        return torch.tanh(self.project(torch.cat([fmap.flatten(1), fmap.amax(dim=(2, 3, 4))], dim=1)))

    def forward(self, volumes: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(B, L, V)`` for input tokens ``(B, L)`` (teacher forcing)."""
        feat = self.encode(volumes)
        steps = torch.cat([self.embed(tokens), feat[:, None, :].expand(-1, tokens.shape[1], -1)], dim=2)
        h, _ = self.gru(steps, feat[None].contiguous())
        return self.out(h)

    @torch.no_grad()
    def generate(self, volumes: torch.Tensor, max_len: int) -> np.ndarray:
        """Greedy decoding: token ids ``(B, max_len)`` after ``<bos>`` (computed on the model's device)."""
        dev = next(self.parameters()).device
        feat = self.encode(volumes.to(dev))
        h = feat[None].contiguous()
        tok = torch.full((volumes.shape[0], 1), 1, dtype=torch.long, device=dev)
        out = []
        for _ in range(max_len):
            step = torch.cat([self.embed(tok), feat[:, None, :]], dim=2)
            y, h = self.gru(step, h)
            tok = self.out(y).argmax(-1)
            out.append(tok)
        return torch.cat(out, dim=1).cpu().numpy()


def save_generator(
    model: ReportGenerator, vocab: Vocabulary, scaling: ChannelScaling, path: str | Path, meta: dict[str, Any]
) -> Path:
    """Write a checkpoint: weights, config, vocabulary, input scaling and ``meta`` (plain values only).

    Parameters
    ----------
    model, vocab, scaling
        What is needed to write reports for new volumes.
    path
        Destination file (its folder is created).
    meta
        Extra plain values (seed, parameters).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    fields = {"config": asdict(model.config), "vocabulary": list(vocab.tokens), "scaling": asdict(scaling), **meta}
    return save_network(model, path, fields)


def load_generator(path: str | Path) -> tuple[ReportGenerator, Vocabulary, ChannelScaling]:
    """Rebuild what :func:`save_generator` wrote (model in eval mode), without retraining."""
    ckpt = torch.load(Path(path), weights_only=True)
    cfg = ckpt["config"]
    config = GeneratorConfig(
        volume_shape=tuple(cfg["volume_shape"]),
        vocab_size=cfg["vocab_size"],
        channels=tuple(cfg["channels"]),
        hidden=cfg["hidden"],
        embed=cfg["embed"],
    )
    model = ReportGenerator(config)
    model.load_state_dict(ckpt["state_dict"])
    scaling = ChannelScaling(mean=tuple(ckpt["scaling"]["mean"]), std=tuple(ckpt["scaling"]["std"]))
    return model.eval(), Vocabulary(tokens=tuple(ckpt["vocabulary"])), scaling


def train_generator(
    model: ReportGenerator,
    volumes: np.ndarray,
    token_ids: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    desc: str = "report generator",
) -> list[float]:
    """Train with teacher forcing and cross-entropy (padding ignored), Adam.

    Parameters
    ----------
    model
        The generator, trained in place on its device (batches are ordered on the CPU and moved there).
    volumes
        ``(n, 2, D, H, W)`` float32 inputs.
    token_ids
        ``(n, L)`` encoded reports.
    epochs, batch_size, lr
        Optimisation settings.
    seed
        Seed of the batch order.
    desc
        Progress-bar label.

    Returns
    -------
    list of float
        Mean training loss per epoch.
    """
    x = torch.from_numpy(np.ascontiguousarray(volumes, dtype=np.float32))
    y = torch.from_numpy(token_ids)
    gen = torch.Generator().manual_seed(int(seed))
    dev = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in tqdm(range(epochs), desc=desc, leave=False):
        perm = torch.randperm(len(x), generator=gen)
        total = 0.0
        for start in range(0, len(x), batch_size):
            idx = perm[start : start + batch_size]
            xb, yb = x[idx].to(dev), y[idx].to(dev)
            logits = model(xb, yb[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb[:, 1:].reshape(-1), ignore_index=0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / len(x))
    model.eval()
    return losses


def generate_reports(
    model: ReportGenerator, vocab: Vocabulary, volumes: np.ndarray, max_len: int, batch_size: int = 64
) -> list[str]:
    """Greedy reports for volumes ``(n, 2, D, H, W)``."""
    model.eval()
    out: list[str] = []
    for start in range(0, len(volumes), batch_size):
        batch = np.ascontiguousarray(volumes[start : start + batch_size], dtype=np.float32)
        ids = model.generate(torch.from_numpy(batch), max_len)
        out.extend(vocab.decode(row) for row in ids)
    return out
