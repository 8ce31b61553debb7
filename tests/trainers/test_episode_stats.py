"""Per-episode metrics: from the environment's final info to summaries and
evaluations."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.environments import suite_gym
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.evaluator import Evaluator


class _Goal(gym.Env):
    """Episodes of ``length`` steps; the last step reports success iff the
    sum of actions was positive."""

    observation_space = gym.spaces.Box(-1, 1, (1, ), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length=3):
        self.length = length

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.total = 0, 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        self.total += int(action)
        done = self.t == self.length
        info = {"is_success": self.total > 0} if done else {}
        return np.zeros(1, np.float32), 1.0, done, False, info


def _env(n, lengths):
    vec = gym.vector.SyncVectorEnv(
        [lambda length=length: _Goal(length) for length in lengths[:n]],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return suite_gym.GymEnvironment(vec, episode_info={
        "success_rate": "is_success"})


def test_final_info_becomes_episode_metrics():
    env = _env(2, [2, 3])
    env.reset(seed=0)
    ts = env.step(torch.tensor([1, 0]))
    assert ts.episode_info == {}
    ts = env.step(torch.tensor([1, 0]))  # env 0 ends, successful
    assert ts.episode_info["success_rate"][0] == 1.0
    assert torch.isnan(ts.episode_info["success_rate"][1])
    ts = env.step(torch.tensor([0, 0]))  # env 1 ends, failed
    assert ts.episode_info["success_rate"][1] == 0.0
    env.close()


def test_episode_stats_average_metrics_over_finished_episodes():
    stats = EpisodeStats(2, ["success_rate"])
    nan = float("nan")
    stats.update(torch.ones(2), torch.tensor([True, False]),
                 {"success_rate": torch.tensor([1.0, nan])})
    stats.update(torch.ones(2), torch.tensor([True, True]),
                 {"success_rate": torch.tensor([0.0, 1.0])})
    out = stats.take_interval()
    assert out["episodes"] == 3
    assert abs(out["success_rate"] - 2 / 3) < 1e-9
    assert abs(out["average_return"] - (1 + 1 + 2) / 3) < 1e-9
    assert stats.take_interval() == {}  # the interval starts again


class _AlwaysOne:
    def observe(self, obs, update=True):
        return obs

    def predict_step(self, obs):
        from alf.data_structures import AlgStep
        return AlgStep(output=torch.ones(obs.shape[0], dtype=torch.int64))


def test_a_segment_counts_as_its_steps_one_by_one():
    """`update_segment` (an asynchronous segment's steps at once, for some
    environments) records what `update` step by step records: returns,
    lengths and metrics of the episodes that end, sums carried over."""
    torch.manual_seed(0)
    nan = float("nan")
    one, seg = EpisodeStats(3, ["success_rate"]), EpisodeStats(3, [
        "success_rate"])
    for _ in range(3):  # three segments of 5 steps, envs 1 and 2
        reward = torch.rand(5, 2)
        done = torch.rand(5, 2) < 0.3
        success = torch.where(done, (torch.rand(5, 2) < 0.5).float(),
                              torch.full((5, 2), nan))
        for t in range(5):
            full = lambda x, fill: torch.cat(  # noqa: E731
                [torch.full((1, ), fill, dtype=x.dtype), x[t]])
            one.update(full(reward, 0.0), full(done, False),
                       {"success_rate": full(success, nan)})
        seg.update_segment(reward, done, {"success_rate": success}, [1, 2])
    # The same episodes (a segment records one environment's, then the
    # next's).
    assert len(seg.recent) == len(one.recent) > 3
    for a, b in zip(sorted(seg.recent), sorted(one.recent)):
        assert a == pytest.approx(b)
    torch.testing.assert_close(seg.interval, one.interval)
    torch.testing.assert_close(seg._ret[1:], one._ret[1:])
    torch.testing.assert_close(seg._len[1:], one._len[1:])


def test_evaluator_reports_metrics_of_each_episode():
    evaluator = Evaluator(_env(2, [2, 4]))
    out = evaluator.evaluate(_AlwaysOne())
    assert out["success_rate"] == 1.0
    assert out["average_episode_length"] == 3.0
    evaluator.close()


class _Coin(_AlwaysOne):
    """Deterministic: always 0 (never succeeds); sampling: a fair coin."""

    def predict_step(self, obs):
        from alf.data_structures import AlgStep
        return AlgStep(output=torch.zeros(obs.shape[0], dtype=torch.int64))

    def rollout_step(self, obs):
        from alf.data_structures import AlgStep
        return AlgStep(output=torch.randint(2, (obs.shape[0], )))


def test_sampling_evaluation_is_reproducible_and_leaves_training_rng():
    deterministic = Evaluator(_env(8, [3] * 8), seed=5)
    assert deterministic.evaluate(_Coin())["success_rate"] == 0.0
    deterministic.close()
    sampling = Evaluator(_env(8, [3] * 8), seed=5, deterministic=False)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first = sampling.evaluate(_Coin())
    assert torch.equal(torch.get_rng_state(), before)
    assert 0.0 < first["success_rate"] < 1.0  # 1 - 1/8 per episode
    assert sampling.evaluate(_Coin()) == first
    sampling.close()
