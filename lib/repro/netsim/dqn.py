"""DQN agents from stable-baselines3, with an optional queue-guided exploration.

:class:`GuidedDQN` is stable-baselines3's ``DQN`` whose exploratory actions are drawn from
``softmax(-L_hat(a) / T)`` instead of uniformly, where ``L_hat`` is a latency estimate computed from the
observation by a function the caller supplies (for ``ThreeTierV2X-v0``:
:func:`repro.netsim.v2x.latencies_from_observation`).  With ``guide=None`` it is plain DQN.
The warm-up steps before ``learning_starts`` stay uniform in both cases (stable-baselines3 samples them
itself).  :func:`train_dqn` takes a ``device`` (``cpu``, ``cuda`` or ``auto``, see :mod:`repro.devices`),
handed to stable-baselines3, which builds the Q-networks on the CPU and moves them there; replay sampling
and exploration stay with numpy on the CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN

from repro.checkpoints import trained
from repro.devices import resolve_device


@dataclass(frozen=True, kw_only=True)
class DQNConfig:
    """Hyper-parameters of the DQN agent (stable-baselines3 names).

    Parameters
    ----------
    hidden
        Widths of the Q-network's hidden layers.
    learning_rate, gamma, batch_size, buffer_size
        Optimiser step, discount, minibatch and replay size.
    learning_starts, train_freq, target_update_interval
        Uniform warm-up steps, environment steps per gradient step, target-network period.
    exploration_fraction, exploration_final_eps
        Epsilon decays linearly from 1 to ``exploration_final_eps`` over this fraction of training.
    temperature
        Softmax temperature of guided exploration, in the units of the guide's estimate.
    """

    hidden: tuple[int, ...] = (64, 64)
    learning_rate: float = 1e-3
    gamma: float = 0.9
    batch_size: int = 64
    buffer_size: int = 50_000
    learning_starts: int = 500
    train_freq: int = 4
    target_update_interval: int = 500
    exploration_fraction: float = 0.3
    exploration_final_eps: float = 0.05
    temperature: float = 0.05


class GuidedDQN(DQN):
    """stable-baselines3 DQN with exploration guided by ``guide(obs) -> estimated cost per action``.

    Parameters
    ----------
    *args, **kwargs
        Passed to ``stable_baselines3.DQN``.
    guide
        Maps one observation to a cost estimate per action (lower is better); ``None`` keeps uniform
        exploration.
    temperature
        Softmax temperature over the negated estimates.
    """

    def __init__(self, *args, guide: Callable[[np.ndarray], np.ndarray] | None = None, temperature: float = 0.05,
                 **kwargs) -> None:
        self.guide = guide
        self.temperature = temperature
        super().__init__(*args, **kwargs)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "guide"]

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        """Greedy action, or with probability ``exploration_rate`` a guided (or uniform) exploratory one."""
        if self.guide is None:
            return super().predict(observation, state, episode_start, deterministic)
        if deterministic or np.random.rand() >= self.exploration_rate:
            return self.policy.predict(observation, state, episode_start, deterministic)
        batch = np.atleast_2d(observation)
        actions = []
        for obs in batch:
            est = np.asarray(self.guide(obs), dtype=float)
            logits = -(est - est.min()) / self.temperature
            p = np.exp(logits) / np.exp(logits).sum()
            actions.append(np.random.choice(len(p), p=p))
        action = np.array(actions) if np.ndim(observation) > 1 else np.array(actions[0])
        return action, state


@dataclass(frozen=True, kw_only=True)
class TrainedDQN:
    """A trained agent, the per-episode returns seen while training, and the wall time."""

    model: DQN
    episode_returns: tuple[float, ...]
    episode_lengths: tuple[int, ...]
    seconds: float


class _EpisodeLog(gym.Wrapper):
    """Records the return and length of every finished episode."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self._ret, self._len = 0.0, 0

    def reset(self, **kwargs):
        self._ret, self._len = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self._ret += float(r)
        self._len += 1
        if term or trunc:
            self.returns.append(self._ret)
            self.lengths.append(self._len)
        return obs, r, term, trunc, info


def train_dqn(env: gym.Env, steps: int, seed: int, config: DQNConfig,
              guide: Callable[[np.ndarray], np.ndarray] | None = None, device: str = "cpu") -> TrainedDQN:
    """Train a (guided) DQN for ``steps`` environment steps on ``env``, seeded, with its networks on ``device``.

    Returns
    -------
    TrainedDQN
        The model, the training episodes' returns and lengths, and the training wall time.
    """
    logged = _EpisodeLog(env)
    model = GuidedDQN(
        "MlpPolicy", logged, guide=guide, temperature=config.temperature, seed=seed, device=resolve_device(device), verbose=0,
        learning_rate=config.learning_rate, gamma=config.gamma, batch_size=config.batch_size,
        buffer_size=config.buffer_size, learning_starts=config.learning_starts, train_freq=config.train_freq,
        target_update_interval=config.target_update_interval, exploration_fraction=config.exploration_fraction,
        exploration_final_eps=config.exploration_final_eps,
        policy_kwargs={"net_arch": list(config.hidden), "activation_fn": torch.nn.ReLU},
    )
    t = time.perf_counter()
    model.learn(total_timesteps=steps)
    return TrainedDQN(
        model=model,
        episode_returns=tuple(logged.returns),
        episode_lengths=tuple(logged.lengths),
        seconds=time.perf_counter() - t,
    )


def greedy_actions(model: DQN, obs: np.ndarray) -> np.ndarray:
    """The Q-network's greedy action for a batch of observations (computed on the model's device)."""
    with torch.no_grad():
        q = model.q_net(torch.as_tensor(np.atleast_2d(obs), dtype=torch.float32, device=model.device))
    return q.argmax(dim=1).cpu().numpy()


def save(model: DQN, path: str | Path) -> Path:
    """Save a model as stable-baselines3's zip archive; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    return path.with_suffix(".zip") if path.suffix != ".zip" else path


def load(path: str | Path, device: str = "cpu") -> DQN:
    """Load a model written by :func:`save` onto ``device`` (its exploration guide is not stored; it acts greedily)."""
    return DQN.load(path, device=resolve_device(device))


@dataclass(frozen=True, kw_only=True)
class CheckpointedDQN:
    """A trained (or reloaded) agent and where its checkpoint lies.

    Attributes
    ----------
    trained
        The agent with the returns, lengths and wall time of its training
        (for a reloaded agent, those of the run that trained it).
    path
        The checkpoint (``None`` when not saved).
    """

    trained: TrainedDQN
    path: str | None


def checkpointed_dqn(
    folder: str | None, name: str, reuse: bool, train: Callable[[], TrainedDQN], device: str = "cpu"
) -> CheckpointedDQN:
    """Train an agent with ``train`` and save it as ``folder/name``, or with ``reuse`` load it from there.

    The training curve and wall time are saved beside the archive (see
    :func:`repro.checkpoints.trained`), so a redrawn chapter has them too.
    """

    def run_training() -> tuple[DQN, dict]:
        t = train()
        return t.model, {"returns": list(t.episode_returns), "lengths": list(t.episode_lengths), "seconds": t.seconds}

    done = trained(folder, name, reuse, run_training, save, lambda path: load(path, device))
    x = done.extras
    return CheckpointedDQN(
        trained=TrainedDQN(
            model=done.model,
            episode_returns=tuple(x["returns"]),
            episode_lengths=tuple(x["lengths"]),
            seconds=float(x["seconds"]),
        ),
        path=None if done.path is None else str(done.path),
    )
