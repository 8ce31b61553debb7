"""Straggler preemption: the store counter, the synchronous collector's
early end, the straggler wrapper, and the settings' checks."""
import os
import time
import types

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributed as dist

from alf.algorithms.dqn_algorithm import DQNAlgorithm
from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.algorithms.rl_algorithm import OnPolicyAlgorithm
from alf.environments import straggler, suite_gym
from alf.environments.batched import BatchedEnvironment
from alf.trainers.collector import SyncCollector
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.preemption import Preemption, make_preemption
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.errors import ConfigError


def _store(tmp_path):
    return dist.FileStore(str(tmp_path / "store"), 1)


def _should_stop(preemption, steps):
    # Past the throttle of reads (10x the last read's time, which on a
    # loaded machine can be several milliseconds).
    time.sleep(max(0.0, preemption._next_poll - time.perf_counter()))
    return preemption.should_stop(steps)


def test_a_rank_is_preempted_once_enough_others_are_done(tmp_path):
    store = _store(tmp_path)
    mine = Preemption(store, rank=1, world_size=4, sync_frac=0.6,
                      min_fraction=0.25, unroll_length=10, poll_seconds=0)
    other = Preemption(store, rank=0, world_size=4, sync_frac=0.6,
                       min_fraction=0.25, unroll_length=10)
    assert mine.needed == 3 and mine.min_steps == 3  # ceil(2.4), ceil(2.5)
    mine.begin(7)
    other.begin(7)
    for _ in range(2):
        other.finished()
    assert not _should_stop(mine, 9)  # 2 of the 3 needed
    other.finished()
    assert not _should_stop(mine, 2)  # fewer than min_steps
    assert _should_stop(mine, 3)
    # The next unroll has a counter of its own.
    mine.begin(8)
    assert not _should_stop(mine, 9)


def test_the_throughput_rule_preempts_only_a_rank_slower_than_the_run(
        tmp_path):
    """Ending a rollout early pays when the rank adds steps slower than
    the run's env steps/s; before the run has a rate, DD-PPO's rule."""
    store = _store(tmp_path)
    store.add("preempt/0", 1)
    mine = Preemption(store, 1, 2, 0.5, 0.25, 100, rule="throughput",
                      num_envs=2, poll_seconds=0)
    mine.begin(0)
    assert _should_stop(mine, 30)  # no run rate yet
    mine.set_run_rate(300.0)
    mine.begin(0)
    # 30 steps x 2 envs within 0.2 s (here: at once) is above 300 steps/s.
    assert not mine.should_stop(30)
    time.sleep(0.3)
    assert _should_stop(mine, 30)  # 60 steps in >= 0.3 s: <= 200/s
    with pytest.raises(ConfigError, match="preempt_rule='sometimes'"):
        Preemption(store, 0, 2, 0.5, 0.25, 8, rule="sometimes")
    with pytest.raises(ConfigError, match="preempt_rule='x'; valid"):
        TrainerConfig(algorithm_ctor=PPOAlgorithm, preempt_rule="x")


def test_needed_count_follows_dd_ppo(tmp_path):
    store = _store(tmp_path)
    need = lambda frac, world: Preemption(  # noqa: E731
        store, 0, world, frac, 0.25, 8).needed
    assert need(0.5, 2) == 1 and need(0.6, 2) == 2 and need(0.6, 10) == 6
    assert need(1.0, 8) == 8 and need(0.01, 8) == 1


def test_reads_are_throttled_and_old_counters_deleted(tmp_path):
    store = _store(tmp_path)
    mine = Preemption(store, 0, 2, 0.5, 0.25, 8, poll_seconds=0.2)
    mine.begin(0)
    assert not mine.poll()  # read: nobody done
    store.add("preempt/0", 1)
    assert not mine.poll()  # too soon to read again
    time.sleep(0.25)
    assert mine.poll() and mine.poll()
    for u in range(1, 6):
        mine.begin(u)
    # Rank 0 deletes the counter of unroll u - 4 when unroll u begins.
    assert not store.check(["preempt/0"]) and not store.check(["preempt/1"])
    mine.finished()
    assert int(store.get("preempt/5")) == 1


def test_no_preemption_in_one_process_and_a_clear_error_without_a_group():
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, preempt_stragglers=True)
    assert make_preemption(cfg, 0, 1) is None
    with pytest.raises(ConfigError, match="process group"):
        make_preemption(cfg, 0, 2)
    assert make_preemption(TrainerConfig(algorithm_ctor=PPOAlgorithm), 0,
                           2) is None


@pytest.mark.parametrize("name,value", [("sync_frac", 0.0),
                                        ("sync_frac", 1.5),
                                        ("min_rollout_fraction", -0.1),
                                        ("min_rollout_fraction", "x")])
def test_fractions_out_of_range_are_refused(name, value):
    with pytest.raises(ConfigError, match=f"{name}=.*fraction in"):
        TrainerConfig(algorithm_ctor=PPOAlgorithm, **{name: value})


def test_algorithms_that_cannot_train_on_early_ends_are_refused():
    sizes = dict(num_envs=4, minibatch_size=32, unroll_length=16,
                 preempt_stragglers=True)
    # PPO: both modes; DQN: sync only; a plain on-policy algorithm: none.
    TrainerConfig(algorithm_ctor=PPOAlgorithm, unroll_mode="async",
                  **sizes).per_rank(2)
    TrainerConfig(algorithm_ctor=DQNAlgorithm, **sizes).per_rank(2)
    with pytest.raises(ConfigError, match="DQNAlgorithm cannot .*'async'"):
        TrainerConfig(algorithm_ctor=DQNAlgorithm, unroll_mode="async",
                      **sizes).per_rank(2)
    with pytest.raises(ConfigError, match="with: none"):
        TrainerConfig(algorithm_ctor=OnPolicyAlgorithm, **sizes).per_rank(2)


def test_sync_collector_ends_the_unroll_when_preempted(tmp_path):
    store = _store(tmp_path)
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=12, minibatch_size=8)
    env = suite_gym.load("CartPole-v1", num_envs=2)
    collector = SyncCollector(env, cfg.unroll_length)
    alg = PPOAlgorithm(env.observation_space, env.action_space, cfg)
    preemption = Preemption(store, 1, 2, 0.5, 0.25, 12, poll_seconds=0)
    collector.start(alg, EpisodeStats(2), 0, 0, preemption=preemption)
    try:
        store.add("preempt/0", 1)  # the other rank is done with unroll 0
        collector.collect()
        assert collector.last_preempted and collector.last_steps == 3 * 2
        assert alg.replay_buffer.num_steps == 3
        alg.replay_buffer.clear()
        collector.publish(1)
        collector.collect()  # unroll 1: nobody else done
        assert not collector.last_preempted
        assert collector.last_steps == 12 * 2
        assert alg.replay_buffer.num_steps == 12
        assert int(store.get("preempt/1")) == 1  # counted for the others
    finally:
        collector.close()


class _Timed(BatchedEnvironment):
    """A batched environment whose step takes ``seconds`` (passed to
    ``sleep``: a `_Clock`'s to take them on a fake clock)."""

    def __init__(self, seconds, sleep=time.sleep):
        super().__init__(1, gym.spaces.Box(-1, 1, (1, )),
                         gym.spaces.Discrete(2))
        self.seconds, self.steps, self._sleep = seconds, 0, sleep

    def reset(self, seed=None):
        return "reset"

    def step(self, action):
        self._sleep(self.seconds)
        self.steps += 1
        return action

    def close(self):
        pass


def _seconds_per_step(env, n=60, between=0.0, clock=time):
    env.reset()
    start = clock.perf_counter()
    for _ in range(n):
        env.step(None)
        clock.sleep(between)  # the policy's inference
    return (clock.perf_counter() - start) / n


class _Clock:
    """A fake clock for `straggler` (its ``time``): the straggler's sleeps
    are recorded and move it by what they ask plus ``overshoot`` (as a real
    sleep's); `advance` moves it as the environment and the policy take
    their time. The wrapper's arithmetic, free of the machine's load."""

    def __init__(self, overshoot=1e-4):
        self.now, self.overshoot, self.sleeps = 0.0, overshoot, []

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds + self.overshoot

    def advance(self, seconds):
        self.now += seconds


class _Paced:
    """`_seconds_per_step`'s clock on a `_Clock`: its pauses advance it
    (they are not the straggler's sleeps)."""

    def __init__(self, clock):
        self.perf_counter, self.sleep = clock.perf_counter, clock.advance


def test_the_straggler_wrapper_slows_collection_by_its_factor(monkeypatch):
    clock = _Clock()
    with monkeypatch.context() as patch:
        patch.setattr(straggler, "time", clock)
        paced = _Paced(clock)
        plain = _seconds_per_step(_Timed(0.002, clock.advance),
                                  between=0.001, clock=paced)
        slowed = _seconds_per_step(straggler.SlowedEnvironment(
            _Timed(0.002, clock.advance), 3.0), between=0.001, clock=paced)
        # Each step sleeps twice its period (3 ms: step and inference) less
        # the last sleep's overshoot; the first's period is its step alone.
        assert clock.sleeps == pytest.approx([0.004] + [0.006 - 1e-4] * 59)
        assert slowed / plain == pytest.approx(3.0, abs=0.02)
        # A pause between steps (the learner training) is not stretched:
        # the step after it sleeps for a typical period, not for the pause.
        env = straggler.SlowedEnvironment(_Timed(0.001, clock.advance), 3.0)
        _seconds_per_step(env, n=20, clock=paced)
        clock.advance(0.1)
        start = clock.now
        env.step(None)
        assert clock.now - start == pytest.approx(0.003, abs=3e-4)
    # On the real clock: 60 steps of 2 ms plus 1 ms of inference, at least
    # 3 ms a step unslowed (3.2 on a quiet machine). Slowed 3x, every step
    # but the first sleeps twice the period it measured (at least those
    # 3 ms, or a typical period in place of a longer one), less what the
    # sleeps before overshot: never under 8.9 ms a step, and load only adds.
    real = _seconds_per_step(
        straggler.SlowedEnvironment(_Timed(0.002), 3.0), between=0.001)
    assert real > 0.0085, real
    # The rest of the interface passes through.
    wrapped = _Timed(0)
    slowed = straggler.SlowedEnvironment(wrapped, 2.0)
    assert slowed.num_envs == 1
    assert slowed.action_space is wrapped.action_space
    assert slowed.episode_info == ()


class _Episodes(_Timed):
    """`_Timed` (no sleep) whose episodes end every 5th step."""

    def __init__(self):
        super().__init__(0)

    def step(self, action):
        self.steps += 1
        end = torch.tensor([self.steps % 5 == 0])
        return types.SimpleNamespace(terminated=end,
                                     truncated=torch.tensor([False]))


def test_the_delay_spread_draws_one_factor_per_episode_from_the_seed():
    def factors(seed, episodes=400):
        env = straggler.SlowedEnvironment(_Episodes(), 1.0, delay=0.0,
                                          delay_spread=0.5)
        env.reset(seed=seed)
        out = []
        for _ in range(5 * episodes):
            out.append(env._factor)  # the factor this step is delayed by
            env.step(None)
        return np.array(out).reshape(episodes, 5)

    a = factors(seed=3)
    assert (a == a[:, :1]).all()  # one factor for an episode's steps
    assert len(np.unique(a[:, 0])) == len(a)  # a new one each episode
    assert 0.45 < np.log(a[:, 0]).std() < 0.55
    np.testing.assert_array_equal(a, factors(seed=3))
    assert not np.array_equal(a, factors(seed=4))
    with pytest.raises(ConfigError, match="delay_spread=-1"):
        straggler.straggler_load("CartPole-v1", 1, delay_spread=-1)


def test_straggler_load_slows_only_the_named_ranks(monkeypatch):
    monkeypatch.setenv(straggler.RANK_VARIABLE, "1")
    env = straggler.straggler_load("CartPole-v1", 1, ranks=(1, ))
    assert isinstance(env, straggler.SlowedEnvironment)
    env.close()
    monkeypatch.setenv(straggler.RANK_VARIABLE, "0")
    env = straggler.straggler_load("CartPole-v1", 1, ranks=(1, ))
    assert not isinstance(env, straggler.SlowedEnvironment)
    env.close()
    assert os.environ[straggler.RANK_VARIABLE] == "0"


def test_the_straggler_delay_adds_fixed_seconds_per_step(monkeypatch):
    fake = _Clock()
    with monkeypatch.context() as patch:
        patch.setattr(straggler, "time", fake)
        paced = _Paced(fake)
        plain = _seconds_per_step(_Timed(0.001, fake.advance), n=30,
                                  clock=paced)
        delayed = _seconds_per_step(straggler.SlowedEnvironment(
            _Timed(0.001, fake.advance), 1.0, delay=0.01), n=30, clock=paced)
    # 10 ms a step, less the last sleep's overshoot.
    assert fake.sleeps == pytest.approx([0.01] + [0.01 - 1e-4] * 29)
    assert delayed - plain == pytest.approx(0.01, rel=0.01)
    # On the real clock: the straggler's sleeps add up to at least the
    # 30 x 10 ms asked (each takes off what the last overshot), the steps'
    # own 1 ms each: never under 11 ms a step, and load only adds to it.
    delayed = _seconds_per_step(
        straggler.SlowedEnvironment(_Timed(0.001), 1.0, delay=0.01), n=30)
    assert delayed > 0.0109, delayed
    monkeypatch.setenv(straggler.RANK_VARIABLE, "1")
    env = straggler.straggler_load("CartPole-v1", 1, ranks=(1, ), delay=0.01)
    assert isinstance(env, straggler.SlowedEnvironment)
    env.close()
    for bad in ({"slowdown": 0.5}, {"delay": -1.0}):
        with pytest.raises(ConfigError, match="slowdown=.*valid"):
            straggler.straggler_load("CartPole-v1", 1, **bad)


def test_settings_under_which_no_rank_can_be_preempted_say_so(
        monkeypatch, caplog):
    from alf.trainers import preemption
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, preempt_stragglers=True)
    make_preemption(cfg, 0, 1)
    assert "does nothing in a single process" in caplog.text
    monkeypatch.setattr(preemption.distributed, "store",
                        lambda: torch.distributed.HashStore())
    one_step = TrainerConfig(algorithm_ctor=PPOAlgorithm, unroll_length=1,
                             num_envs=64, minibatch_size=32,
                             preempt_stragglers=True)
    assert make_preemption(one_step, 0, 2) is not None
    assert "unroll_length=1 and min_rollout_fraction" in caplog.text
    caplog.clear()
    make_preemption(TrainerConfig(algorithm_ctor=PPOAlgorithm,
                                  preempt_stragglers=True), 0, 2)
    assert "none is ever preempted" not in caplog.text


def test_preemption_settings_without_preemption_say_they_do_nothing(caplog):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, sync_frac=0.5,
                        min_rollout_fraction=0.5)
    assert make_preemption(cfg, 0, 2) is None
    assert ("TrainerConfig.sync_frac=0.5, min_rollout_fraction=0.5 does "
            "nothing without preempt_stragglers=True") in caplog.text
    caplog.clear()
    assert make_preemption(TrainerConfig(algorithm_ctor=PPOAlgorithm),
                           0, 2) is None
    assert "does nothing" not in caplog.text
