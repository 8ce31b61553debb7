"""A new environment suite needs nothing but `alf.environments.batched`.

The suite below is what a user writes: a `BatchedEnvironment` subclass
stepping in torch (no gymnasium vector env) and a ``load`` function, bound
as ``TrainerConfig.env_load_fn``. PPO trains on it through the real trainer.
"""
import functools
import os

import gin
import gymnasium as gym
import pytest
import torch

from alf.algorithms import PPOAlgorithm
from alf.data_structures import TimeStep
from alf.environments.batched import BatchedEnvironment
from alf.trainers import Trainer, TrainerConfig
from alf.trainers.evaluator import EVAL_CSV_COLUMNS, read_eval_csv
from alf.utils.errors import AlfError, ConfigError

LENGTH = 5  # cells of the chain
HORIZON = 8  # steps per episode

#: Every environment `load` built, to check that the trainer closed them.
_built = []


class Chain(BatchedEnvironment):
    """1-D chains of `LENGTH` cells: action 1 moves right and earns 1,
    action 0 moves left and earns 0. Episodes start at cell 0 and are
    truncated after `HORIZON` steps, so a random policy earns about
    ``HORIZON / 2`` and always moving right earns ``HORIZON``.

    Only the interface's required parts: no episode metrics, no frames.
    """

    def __init__(self, num_envs: int):
        super().__init__(num_envs,
                         gym.spaces.Box(0.0, 1.0, (LENGTH, )),
                         gym.spaces.Discrete(2))
        self._cell = torch.zeros(num_envs, dtype=torch.int64)
        self._t = torch.zeros(num_envs, dtype=torch.int64)
        self.closed = False

    def _observation(self) -> torch.Tensor:
        return torch.nn.functional.one_hot(self._cell, LENGTH).float()

    def reset(self, seed=None) -> TimeStep:
        # Every episode starts at cell 0: there is nothing to seed.
        self._cell.zero_()
        self._t.zero_()
        false = torch.zeros(self.num_envs, dtype=torch.bool)
        return TimeStep(self._observation(), torch.zeros(self.num_envs),
                        false, false.clone())

    def step(self, action: torch.Tensor) -> TimeStep:
        right = action.cpu() == 1
        self._cell = (self._cell + torch.where(right, 1, -1)).clamp(
            0, LENGTH - 1)
        self._t += 1
        truncated = self._t >= HORIZON
        final = None
        if truncated.any():
            final = self._observation()
            self._cell[truncated] = 0
            self._t[truncated] = 0
        return TimeStep(self._observation(), right.float(),
                        torch.zeros_like(truncated), truncated, final)

    def close(self) -> None:
        self.closed = True


class MeasuredChain(Chain):
    """`Chain` with an episode metric: ``at_end``, whether the episode
    ended in the last cell."""

    @property
    def episode_info(self):
        return ("at_end", )

    def step(self, action: torch.Tensor) -> TimeStep:
        ts = super().step(action)
        if ts.final_observation is None:
            return ts
        at_end = torch.where(ts.done, ts.final_observation[:, -1],
                             float("nan"))
        return ts._replace(episode_info={"at_end": at_end})


SUITE = {"Chain": Chain, "MeasuredChain": MeasuredChain}


def load(env_name: str, num_envs: int = 1, seed=None,
         asynchronous: bool = False) -> BatchedEnvironment:
    """The chain suite: ``env_name`` is ``"Chain"`` or ``"MeasuredChain"``;
    ``seed`` and ``asynchronous`` do not apply."""
    if env_name not in SUITE:
        raise AlfError(f"unknown chain {env_name!r}; known: {list(SUITE)}")
    env = SUITE[env_name](num_envs)
    _built.append(env)
    return env


@pytest.fixture(autouse=True)
def clean():
    gin.clear_config()
    _built.clear()
    yield
    gin.clear_config()


def _config(env_name: str, iterations: int, **kw) -> TrainerConfig:
    args = dict(
        # Short-sighted and a large step: the best action is the same in
        # every cell, learnt in ~10 iterations. (At gamma 0.99 values reach
        # ~100 and the critic's early errors between cells can outweigh the
        # reward of 1, so a seed may settle on moving left.)
        algorithm_ctor=functools.partial(PPOAlgorithm, learning_rate=3e-3,
                                         gamma=0.9),
        env_load_fn=load, env_name=env_name, num_envs=4, unroll_length=16,
        minibatch_size=32, num_epochs=4,
        num_env_steps=iterations * 64, eval_interval=0, num_eval_episodes=8,
        # The sampling policy: the untrained network's mode may already
        # move right everywhere, its samples do not.
        eval_deterministic=False, summary_interval=100,
        checkpoint_interval=100, log_interval_seconds=1000.0)
    args.update(kw)
    return TrainerConfig(**args)


@pytest.mark.timeout(240)
def test_ppo_learns_a_new_suite_and_reports_its_episode_metric(tmp_path):
    root = str(tmp_path)
    # best_metric is checked against the environment's episode_info.
    Trainer(root, config=_config("MeasuredChain", 15,
                                 best_metric="at_end")).train()
    evals = read_eval_csv(os.path.join(root, "eval.csv"))
    assert list(evals) == [*EVAL_CSV_COLUMNS, "at_end"]
    # Random (and after one iteration): 4-5, rarely at the end (a walk
    # from cell 0, reflected there).
    assert evals["average_return"][-1] > 7, evals
    assert evals["at_end"][-1] > 0.7, evals
    assert os.path.exists(os.path.join(root, "ckpt", "best.json"))
    # Training's, and evaluation's one per episode: every one was closed.
    assert len(_built) == 1 + 8 and all(env.closed for env in _built)


@pytest.mark.timeout(120)
def test_a_suite_without_the_optional_parts_gets_the_defaults(tmp_path):
    env = load("Chain", num_envs=2)
    assert env.episode_info == ()
    with pytest.raises(AlfError, match="Chain environments do not render"):
        env.render()
    root = str(tmp_path)
    Trainer(root, config=_config("Chain", 1)).train()
    assert list(read_eval_csv(os.path.join(root, "eval.csv"))) == list(
        EVAL_CSV_COLUMNS)
    with pytest.raises(ConfigError, match="best_metric='at_end'"):
        Trainer(str(tmp_path / "b"),
                config=_config("Chain", 1, best_metric="at_end")).train()


def test_an_implementation_missing_a_required_method_is_refused():

    class NoStep(BatchedEnvironment):

        def reset(self, seed=None):
            return None

        def close(self):
            pass

    with pytest.raises(TypeError, match="abstract method.*step"):
        NoStep(1, gym.spaces.Box(0.0, 1.0, (1, )), gym.spaces.Discrete(2))


def _gymnasium_vector_env(env_name, num_envs, seed=None, asynchronous=False):
    return gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")] * num_envs)


def test_a_load_function_returning_something_else_is_refused(tmp_path):
    cfg = _config("CartPole-v1", 1, env_load_fn=_gymnasium_vector_env)
    with pytest.raises(ConfigError) as info:
        Trainer(str(tmp_path), config=cfg).train()
    msg = str(info.value)
    assert "_gymnasium_vector_env returned a SyncVectorEnv" in msg, msg
    assert "BatchedEnvironment" in msg and "\n" not in msg, msg
