"""Training and evaluating agents on ``OppComm-v0``, shared by the opportunistic-communication chapters.

:class:`Scenario` names a city, a packet rate and a deadline; :func:`train_q_agents` trains the
per-device (or shared) Q-tables on one mobility seed and returns their learning curve;
:func:`evaluate` plays any policy, learned or heuristic, on a held-out mobility seed with the same
environment and returns its 4G cost and latency compliance.

Three cities per training seed ``s`` (``s`` below :data:`TEST_OFFSET`): agents train on city ``s``, a
baseline's setting is chosen on the validation city ``s + VALIDATION_OFFSET``
(:func:`choose_on_validation`), and every policy is judged on the test city ``s + TEST_OFFSET``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
from tqdm import tqdm

from repro.checkpoints import trained
from repro.netsim.mobility import CitySpec
from repro.netsim.oppcomm import ACTIONS, OppCommConfig, OppCommEnv
from repro.netsim.qlearning import QLearningConfig, TabularQ, env_rewards, play_episode

TEST_OFFSET = 1000
"""The test city of training seed ``s`` is mobility seed ``s + TEST_OFFSET`` (training seeds lie below it)."""
VALIDATION_OFFSET = 2000
"""The validation city of training seed ``s`` is mobility seed ``s + VALIDATION_OFFSET``."""


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One opportunistic-communication scenario.

    Parameters
    ----------
    buses, rsus
        Fleet size (one device per bus) and RSU count.
    grid, block_m
        Intersections per side and block length of the road grid.
    routes
        Bus routes.
    horizon_s
        Simulated seconds per episode.
    gen_interval_s, delta_s
        Packet interval and latency threshold.
    rsu_centre_share
        Share of RSUs in the central square (0 = uniform).
    """

    buses: int
    rsus: int
    grid: int = 31
    block_m: float = 100.0
    routes: int = 12
    horizon_s: float = 3600.0
    gen_interval_s: int = 30
    delta_s: float = 120.0
    rsu_centre_share: float = 0.0

    def config(self, theta: float = 0.5) -> OppCommConfig:
        """The environment configuration of this scenario with reward weight ``theta``."""
        city = CitySpec(grid=self.grid, block_m=self.block_m, buses=self.buses, routes=min(self.routes, self.buses),
                        horizon_s=self.horizon_s)
        return OppCommConfig(city=city, rsus=self.rsus, rsu_centre_share=self.rsu_centre_share,
                             gen_interval_s=self.gen_interval_s, delta_s=self.delta_s, theta=theta)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one policy achieved in one episode.

    Attributes
    ----------
    cost_4g_percent
        Packets sent over 4G, percent of those generated (all-4G = 100).
    compliance_percent
        Decided packets that met delta, percent.
    late_percent
        ``100 - compliance_percent``.
    rsu_percent
        Packets delivered through RSUs, percent of those generated.
    """

    cost_4g_percent: float
    compliance_percent: float
    late_percent: float
    rsu_percent: float

    @property
    def saving_percent(self) -> float:
        """4G cost saved against all-4G, percent."""
        return 100.0 - self.cost_4g_percent


def _outcome(env: OppCommEnv) -> Outcome:
    s = env.stats()
    return Outcome(
        cost_4g_percent=s.cost_4g_percent,
        compliance_percent=s.compliance_percent,
        late_percent=100.0 - s.compliance_percent,
        rsu_percent=100.0 * s.sent_rsu / max(s.generated, 1),
    )


def train_q_agents(
    scenario: Scenario,
    episodes: int,
    seed: int,
    qconfig: QLearningConfig,
    theta: float = 0.5,
    reward_fn: Callable[[dict, dict], np.ndarray] = env_rewards,
    desc: str = "Q-learning",
) -> tuple[TabularQ, list[Outcome]]:
    """Train Q-tables for ``episodes`` episodes on the mobility of ``seed``.

    Parameters
    ----------
    scenario
        The scenario.
    episodes
        Training episodes (epsilon follows ``qconfig.epsilon_at``).
    seed
        Mobility seed of the training city; also seeds exploration.
    qconfig
        Q-learning hyper-parameters.
    theta
        Reward weight of the environment (ignored by a custom ``reward_fn``).
    reward_fn
        Reward the agents learn from (default: the environment's).
    desc
        Progress-bar label.

    Returns
    -------
    tuple
        The trained agent and the outcome of every training episode (the learning curve).
    """
    env = OppCommEnv(scenario.config(theta))
    agent = TabularQ(env.config.devices, env.config.n_states, len(ACTIONS), qconfig)
    rng = np.random.default_rng([seed, 17])
    curve = []
    for ep in tqdm(range(episodes), desc=desc, leave=False):
        eps = qconfig.epsilon_at(ep)
        play_episode(env, seed, lambda obs, info: agent.act(obs["state"], obs["mask"], eps, rng), agent, reward_fn)
        curve.append(_outcome(env))
    return agent, curve


@dataclass(frozen=True, kw_only=True)
class TrainedAgents:
    """Q-tables with their learning curve, trained now or loaded from a checkpoint.

    Attributes
    ----------
    agent
        The Q-tables.
    curve
        The outcome of every training episode.
    path
        The checkpoint (``None`` when not saved).
    """

    agent: TabularQ
    curve: tuple[Outcome, ...]
    path: str | None


def checkpointed_q_agents(
    folder: str | None, name: str, reuse: bool, qconfig: QLearningConfig, train: Callable[[], tuple[TabularQ, list[Outcome]]]
) -> TrainedAgents:
    """Train Q-tables with ``train`` and save them as ``folder/name`` (``.npy``), or with ``reuse`` load them.

    The learning curve is saved beside the tables (see :func:`repro.checkpoints.trained`), so a
    redrawn chapter has its curves too.
    """

    def run_training() -> tuple[TabularQ, dict]:
        agent, curve = train()
        return agent, {"curve": [asdict(o) for o in curve]}

    done = trained(
        folder, name, reuse, run_training, lambda agent, path: agent.save(path), lambda path: TabularQ.load(path, qconfig)
    )
    return TrainedAgents(
        agent=done.model,
        curve=tuple(Outcome(**o) for o in done.extras["curve"]),
        path=None if done.path is None else str(done.path),
    )


def evaluate(
    scenario: Scenario, seed: int, act: Callable[[dict, dict, np.random.Generator], np.ndarray], theta: float = 0.5
) -> Outcome:
    """Play ``act(obs, info, rng)`` for one episode on the mobility of ``seed`` (no learning)."""
    env = OppCommEnv(scenario.config(theta))
    rng = np.random.default_rng([seed, 29])
    play_episode(env, seed, lambda obs, info: act(obs, info, rng))
    return _outcome(env)


def greedy_q(agent: TabularQ) -> Callable[[dict, dict, np.random.Generator], np.ndarray]:
    """The learned policy with exploration off."""
    return lambda obs, info, rng: agent.greedy(obs["state"], obs["mask"])


def choose_on_validation(outcomes: dict[str, Outcome], max_late_percent: float) -> str:
    """The setting with the largest 4G saving among those that kept late packets within ``max_late_percent``.

    Where none did, the setting with the fewest late packets (ties: the larger saving).

    Parameters
    ----------
    outcomes
        Each candidate setting's outcome on the validation city.
    max_late_percent
        The latency bound a setting must keep.
    """
    if not outcomes:
        raise ValueError("no candidate settings to choose from")
    ok = {k: o for k, o in outcomes.items() if o.late_percent <= max_late_percent}
    if ok:
        return max(ok, key=lambda k: ok[k].saving_percent)
    return min(outcomes, key=lambda k: (outcomes[k].late_percent, -outcomes[k].saving_percent))
