"""FedDRL: a DDPG agent that chooses the aggregation weights of every round.

The server's agent sees, for the ``K`` clients of a round (ordered by
partition id), the state

``s = [pre-loss_1..K, post-loss_1..K, share_1..K]``  (length ``3K``)

where *pre-loss* is the received global model's cross-entropy on the
client's data, *post-loss* the client's mean training loss after its local
steps and *share* its share of the round's samples.  Its action ``a`` (``K``
reals) becomes the impact factors ``softmax(a)``; a constant action gives
equal weights, which is FedAvg over equally sized clients.  The reward of an
action is read one round later, from the pre-losses of the model it
produced: ``r = -(mean + beta * std)`` of the per-client losses, favouring a
model that is good on average and even across clients.

The agent is a plain DDPG (actor, critic, target networks with soft
updates, a FIFO replay buffer, Gaussian exploration), trained online during
federated training.  The state/action/reward structure follows third-party
summaries of the paper; the reward's exact form, network sizes and
hyper-parameters are reconstructed (see the chapter).

The policy plugs into :class:`~repro.federated.weighting.FlowerPolicyFedAvg`; the
clients run :func:`make_loss_reporting_client_app`, the regularised client
of :mod:`repro.federated.regularised` (so FedProx runs on the same app) that also reports
the pre-loss.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from repro.federated.arrays import from_arrayrecord
from repro.federated.client import RunConfig, client_app_with
from repro.federated.regularised import train_regularised
from repro.federated.replies import metrics_of
from repro.federated.task import TaskSpec, client_data, work_model
from repro.federated.weighting import AggregationWeightPolicy
from repro.models import set_weights

PRE_LOSS = "pre-loss"
STATE_PER_CLIENT = 3
"""Numbers each client contributes to the agent's state: its loss before and after training, its sample share."""


# ----- the state, the action and the reward -----------------------------------------
def feddrl_state(stats: list[dict[str, float]]) -> np.ndarray:
    """The agent's state ``[pre-losses, post-losses, sample shares]`` (length ``STATE_PER_CLIENT * K``), by partition id.

    Parameters
    ----------
    stats
        One dict per client with ``partition-id``, ``pre-loss``, ``train-loss`` and ``num-examples``.
    """
    if not stats:
        raise ValueError("stats must not be empty")
    missing = {PRE_LOSS, "train-loss", "num-examples", "partition-id"} - set(stats[0])
    if missing:
        raise ValueError(f"client statistics lack {sorted(missing)}; use make_loss_reporting_client_app")
    rows = sorted(stats, key=lambda s: int(s["partition-id"]))
    n = np.array([float(s["num-examples"]) for s in rows])
    return np.concatenate([[float(s[PRE_LOSS]) for s in rows], [float(s["train-loss"]) for s in rows],
                           n / n.sum()]).astype(np.float32)


def action_to_weights(action: np.ndarray) -> np.ndarray:
    """Unnormalised impact factors ``exp(a - max a)`` (their normalisation is ``softmax(a)``); all positive."""
    a = np.asarray(action, dtype=np.float64)
    if a.ndim != 1 or not np.all(np.isfinite(a)):
        raise ValueError(f"action must be a finite vector, got {a}")
    return np.exp(a - a.max())


def balance_reward(losses: np.ndarray, beta: float = 1.0) -> float:
    """``-(mean + beta * std)`` of the global model's per-client losses."""
    losses = np.asarray(losses, dtype=np.float64)
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    return float(-(losses.mean() + beta * losses.std()))


# ----- DDPG pieces --------------------------------------------------------------
class ReplayBuffer:
    """FIFO store of ``(state, action, reward, next_state)`` transitions with a fixed capacity."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[tuple[np.ndarray, np.ndarray, float, np.ndarray]] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._items)

    def push(self, state: np.ndarray, action: np.ndarray, reward: float, next_state: np.ndarray) -> None:
        """Append one transition, dropping the oldest when full."""
        self._items.append((np.asarray(state, np.float32), np.asarray(action, np.float32), float(reward),
                            np.asarray(next_state, np.float32)))

    def items(self) -> list[tuple[np.ndarray, np.ndarray, float, np.ndarray]]:
        """The stored transitions, oldest first."""
        return list(self._items)

    def sample(self, batch_size: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        """A batch (with replacement) as tensors ``(s, a, r, s')``."""
        if not self._items:
            raise ValueError("the replay buffer is empty")
        idx = rng.integers(0, len(self._items), size=batch_size)
        s, a, r, s2 = zip(*(self._items[i] for i in idx))
        return (torch.from_numpy(np.stack(s)), torch.from_numpy(np.stack(a)),
                torch.tensor(r, dtype=torch.float32)[:, None], torch.from_numpy(np.stack(s2)))


def _mlp(inp: int, hidden: int, out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(inp, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, out))


def soft_update(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target``, parameter by parameter (tau=1 copies, tau=0 keeps)."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must lie in [0, 1], got {tau}")
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            if tau == 1.0:
                t.copy_(s)
            elif tau > 0.0:
                t.mul_(1.0 - tau).add_(s, alpha=tau)


@dataclass(frozen=True, kw_only=True)
class DDPGSettings:
    """The DDPG agent's hyper-parameters (everything but the problem's sizes and the seed).

    Attributes
    ----------
    hidden
        Width of the two hidden layers of the actor and of the critic.
    action_scale
        The actor's output is ``action_scale * tanh(.)``.
    gamma, tau
        Discount and soft-update rate of the target networks.
    lr_actor, lr_critic
        Adam learning rates.
    sigma
        Standard deviation of the Gaussian exploration noise (in units of ``action_scale``).
    capacity, batch_size
        Replay buffer size and training batch.
    """

    hidden: int = 64
    action_scale: float = 2.0
    gamma: float = 0.9
    tau: float = 0.01
    lr_actor: float = 1e-3
    lr_critic: float = 1e-3
    sigma: float = 0.1
    capacity: int = 5000
    batch_size: int = 32


class DDPGAgent:
    """A small DDPG actor-critic for a ``state_dim -> action_dim`` continuous control problem.

    Parameters
    ----------
    state_dim, action_dim
        Sizes of the state and the action.
    settings
        The hyper-parameters (:class:`DDPGSettings`; its defaults when omitted).
    seed
        Seeds the networks, the noise and the batches.
    """

    def __init__(self, state_dim: int, action_dim: int, *, settings: DDPGSettings | None = None,
                 seed: int = 0) -> None:
        cfg = settings if settings is not None else DDPGSettings()
        hidden, sigma = cfg.hidden, cfg.sigma
        if state_dim < 1 or action_dim < 1:
            raise ValueError(f"state_dim and action_dim must be >= 1, got {state_dim}, {action_dim}")
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        gen = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            self.actor = _mlp(state_dim, hidden, action_dim)
            self.critic = _mlp(state_dim + action_dim, hidden, 1)
        with torch.no_grad():  # start from (nearly) constant actions: equal weights
            head = self.actor[-1]
            assert isinstance(head, torch.nn.Linear)
            head.weight.mul_(1e-3)
            head.bias.zero_()
        self.actor_target, self.critic_target = copy.deepcopy(self.actor), copy.deepcopy(self.critic)
        self.opt_actor = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr_actor)
        self.opt_critic = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr_critic)
        self.buffer = ReplayBuffer(cfg.capacity)
        self.action_scale, self.gamma, self.tau, self.sigma = cfg.action_scale, cfg.gamma, cfg.tau, sigma
        self.batch_size = cfg.batch_size
        self.rng = np.random.default_rng([seed, 0xDD96])

    def _policy(self, net: torch.nn.Module, s: torch.Tensor) -> torch.Tensor:
        return self.action_scale * torch.tanh(net(s))

    def act(self, state: np.ndarray, explore: bool = True) -> np.ndarray:
        """The actor's action for ``state``, plus Gaussian noise when ``explore``."""
        with torch.no_grad():
            a = self._policy(self.actor, torch.as_tensor(state, dtype=torch.float32)[None])[0].numpy()
        if explore and self.sigma > 0:
            a = a + self.rng.normal(0.0, self.sigma * self.action_scale, size=a.shape).astype(np.float32)
        return a.astype(np.float32)

    def update(self) -> tuple[float, float]:
        """One gradient step of critic and actor on a replay batch, then the soft target update.

        Returns
        -------
        tuple of float
            Critic loss and actor loss.
        """
        s, a, r, s2 = self.buffer.sample(self.batch_size, self.rng)
        with torch.no_grad():
            q_next = self.critic_target(torch.cat([s2, self._policy(self.actor_target, s2)], 1))
            target = r + self.gamma * q_next
        critic_loss = torch.nn.functional.mse_loss(self.critic(torch.cat([s, a], 1)), target)
        self.opt_critic.zero_grad()
        critic_loss.backward()
        self.opt_critic.step()
        actor_loss = -self.critic(torch.cat([s, self._policy(self.actor, s)], 1)).mean()
        self.opt_actor.zero_grad()
        actor_loss.backward()
        self.opt_actor.step()
        soft_update(self.actor_target, self.actor, self.tau)
        soft_update(self.critic_target, self.critic, self.tau)
        return critic_loss.item(), actor_loss.item()


class DDPGWeights(AggregationWeightPolicy):
    """FedDRL's aggregation-weight policy: the DDPG agent's action, through a softmax.

    Each round it rewards the previous action with :func:`balance_reward` of
    this round's pre-losses, stores the transition, trains the agent
    ``updates`` steps once the buffer holds a batch, and acts on the new state.
    It assumes the same ``K`` clients report every round (full participation).

    Parameters
    ----------
    num_clients
        ``K``.
    beta
        Weight of the loss spread in the reward.
    updates
        Agent gradient steps per round.
    seed
        Seeds the agent.
    settings
        The agent's hyper-parameters (:class:`DDPGSettings`; its defaults when omitted).
    """

    name = "FedDRL (DDPG)"

    def __init__(self, num_clients: int, beta: float = 1.0, updates: int = 10, seed: int = 0, *,
                 settings: DDPGSettings | None = None) -> None:
        self.agent = DDPGAgent(3 * num_clients, num_clients, settings=settings, seed=seed)
        self.num_clients, self.beta, self.updates = num_clients, beta, updates
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self.rewards: list[float] = []

    def raw_weights(self, server_round: int, stats: list[dict[str, float]]) -> np.ndarray:
        """Learn from the last action's reward, then act; returns ``exp(a - max a)`` in ``stats`` order."""
        if len(stats) != self.num_clients:
            raise ValueError(f"FedDRL's agent acts on {self.num_clients} clients; {len(stats)} reported "
                             "(it needs every client every round)")
        state = feddrl_state(stats)
        order = np.argsort([int(s["partition-id"]) for s in stats], kind="stable")
        if self._last is not None:
            reward = balance_reward(state[: self.num_clients], self.beta)
            self.rewards.append(reward)
            self.agent.buffer.push(self._last[0], self._last[1], reward, state)
            if len(self.agent.buffer) >= self.agent.batch_size:
                for _ in range(self.updates):
                    self.agent.update()
        action = self.agent.act(state, explore=True)
        self._last = (state, action)
        w_sorted = action_to_weights(action)
        out = np.empty_like(w_sorted)
        out[order] = w_sorted
        return out


class ConstantActionWeights(AggregationWeightPolicy):
    """The softmax of a fixed action (a constant action gives equal weights); for tests and ablations."""

    name = "constant action"

    def __init__(self, action: np.ndarray) -> None:
        self.action = np.asarray(action, dtype=np.float64)

    def raw_weights(self, server_round, stats):  # noqa: D102
        if len(self.action) != len(stats):
            raise ValueError(f"action has {len(self.action)} entries for {len(stats)} clients")
        return action_to_weights(self.action)


# ----- the client ----------------------------------------------------------------
@torch.no_grad()
def data_loss(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy of ``model`` on ``(x, y)``."""
    model.eval()
    return float(torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)))


def train_reporting(spec: TaskSpec, msg: Message, context: Context) -> Message:
    """One round of the regularised client that also reports ``pre-loss`` (the received model's loss)."""
    torch.set_num_threads(1)
    pid = int(context.node_config["partition-id"])
    model = work_model(spec)
    set_weights(model, from_arrayrecord(msg.content["arrays"]))
    pre = data_loss(model, *client_data(spec, pid))
    reply = train_regularised(spec, msg, context)
    metrics_of(reply)[PRE_LOSS] = pre
    return reply


def make_loss_reporting_client_app(spec: TaskSpec, run_config: RunConfig | None = None) -> ClientApp:
    """The regularised client of :mod:`repro.federated.regularised` (FedAvg, FedProx) that also reports ``pre-loss``.

    ``pre-loss`` is the received model's cross-entropy on the client's whole
    training set, measured before local training; training itself is
    unchanged, so FedAvg on this app equals FedAvg on the shared client.
    """
    return client_app_with(lambda msg, context: train_reporting(spec, msg, context), run_config)
