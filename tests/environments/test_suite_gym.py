"""`alf.environments.suite_gym` on a scripted environment, and the episode
boundaries of the trainer's unroll.

The scripted environment's observation is ``[episode_index, step_in_episode]``
(float32), every step's reward is 1.0 and an episode terminates after
``episode_length`` steps. ``episode_length`` may be a tuple: episode ``e``
then lasts ``episode_length[e % len(episode_length)]`` steps, so
sub-environments started at different episode indices end at different
steps. A seeded reset draws the first episode index from the environment's
RNG; every later reset increments it.
"""
import ctypes
import os
import re
import signal
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.environments import suite_gym
from alf.environments.batched import StepWatch
from alf.utils.errors import AlfError

TERM_ID = "alf_test/Scripted-v0"  # terminates after 3 steps
TRUNC_ID = "alf_test/ScriptedTruncated-v0"  # time limit 2, never terminates
MIXED_ID = "alf_test/ScriptedMixed-v0"  # lengths 2, 3, 5 with time limit 4
MIXED_LENGTHS = (2, 3, 5)
MIXED_LIMIT = 4
RAISE_ID = "alf_test/ScriptedRaise-v0"  # raises after reset(seed=7)


class ScriptedEnv(gym.Env):
    """Observation [episode_index, step_in_episode]; reward 1; Discrete(2)."""

    metadata = {"render_modes": []}

    def __init__(self, episode_length=3, raise_for_seed=None,
                 raise_in="step"):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2, ),
                                                np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._lengths = (episode_length, ) if isinstance(
            episode_length, int) else tuple(episode_length)
        self._episode = None
        self._step = 0
        # The environment reset with this seed raises, in its reset or
        # its steps: a simulator's own failure.
        self._raise_for_seed, self._raise_in = raise_for_seed, raise_in
        self._raising = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._raising = seed == self._raise_for_seed
        if self._raising and self._raise_in == "reset":
            raise ValueError(f"scripted failure in reset (seed {seed})")
        if seed is not None or self._episode is None:
            self._episode = int(self.np_random.integers(0, 1_000_000))
        else:
            self._episode += 1
        self._step = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(int(action)), action
        if self._raising and self._raise_in == "step":
            raise ValueError("scripted failure in step")
        self._step += 1
        length = self._lengths[self._episode % len(self._lengths)]
        return self._obs(), 1.0, self._step >= length, False, {}

    def _obs(self):
        return np.array([self._episode, self._step], dtype=np.float32)


def _register():
    specs = ((TERM_ID, dict(episode_length=3), None),
             (RAISE_ID, dict(episode_length=1000, raise_for_seed=7), None),
             (TRUNC_ID, dict(episode_length=1000), 2),
             (MIXED_ID, dict(episode_length=MIXED_LENGTHS), MIXED_LIMIT))
    for env_id, kwargs, limit in specs:
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=ScriptedEnv, kwargs=kwargs,
                         max_episode_steps=limit)


_register()


def register_in_worker(env):
    """Identity wrapper. Spawned async workers unpickle it by reference, which
    imports this module and so registers the scripted ids there too."""
    return env


def _episode_end_step(episode: int) -> int:
    """Step at which a MIXED_ID episode ends (termination or time limit)."""
    return min(MIXED_LENGTHS[episode % len(MIXED_LENGTHS)], MIXED_LIMIT)


def _is_terminated(episode: int, step: int) -> bool:
    return step == MIXED_LENGTHS[episode % len(MIXED_LENGTHS)]


def _ones(n):
    return torch.ones(n, dtype=torch.int64)


@pytest.fixture
def envs():
    """Collects environments and closes them after the test."""
    opened = []

    def load(*args, **kwargs):
        env = suite_gym.load(*args, **kwargs)
        opened.append(env)
        return env

    yield load
    for env in opened:
        env.close()


# ---- suite_gym.load --------------------------------------------------------


def test_termination_step(envs):
    """An ending step reports terminated, the new first obs and final obs."""
    env = envs(TERM_ID, num_envs=1, seed=0)
    assert env.num_envs == 1
    assert isinstance(env.action_space, gym.spaces.Discrete)
    ts = env.reset()
    assert ts.observation.dtype == torch.float32
    assert ts.observation.shape == (1, 2)
    ep = float(ts.observation[0, 0])
    assert ts.observation[0, 1] == 0
    for step in (1, 2):
        ts = env.step(_ones(1))
        torch.testing.assert_close(ts.observation, torch.tensor([[ep, step]]))
        assert not ts.terminated.any() and not ts.truncated.any()
        assert ts.final_observation is None
        torch.testing.assert_close(ts.next_observation(), ts.observation)
    ts = env.step(_ones(1))
    assert ts.terminated.tolist() == [True]
    assert ts.truncated.tolist() == [False]
    assert ts.done.tolist() == [True]
    assert ts.reward.tolist() == [1.0]
    torch.testing.assert_close(ts.observation, torch.tensor([[ep + 1, 0.0]]))
    torch.testing.assert_close(ts.final_observation, torch.tensor([[ep, 3.0]]))
    torch.testing.assert_close(ts.next_observation(),
                               torch.tensor([[ep, 3.0]]))
    # The next step is a real transition of the new episode (no reset step).
    ts = env.step(_ones(1))
    torch.testing.assert_close(ts.observation, torch.tensor([[ep + 1, 1.0]]))
    assert ts.reward.tolist() == [1.0] and not ts.done.any()


def test_truncation_step(envs):
    """A registered time limit truncates (not terminates) with final obs."""
    env = envs(TRUNC_ID, num_envs=2, seed=3)
    ep = env.reset().observation[:, 0]
    ts = env.step(_ones(2))
    assert not ts.done.any() and ts.final_observation is None
    ts = env.step(_ones(2))
    assert ts.truncated.tolist() == [True, True]
    assert ts.terminated.tolist() == [False, False]
    torch.testing.assert_close(ts.observation,
                               torch.stack([ep + 1, torch.zeros(2)], 1))
    torch.testing.assert_close(ts.final_observation,
                               torch.stack([ep, torch.full((2, ), 2.0)], 1))
    torch.testing.assert_close(ts.next_observation(), ts.final_observation)


def test_load_max_episode_steps_overrides(envs):
    """load(max_episode_steps=2) truncates an episode that would last 3."""
    env = envs(TERM_ID, num_envs=1, seed=0, max_episode_steps=2)
    env.reset()
    env.step(_ones(1))
    ts = env.step(_ones(1))
    assert ts.truncated.tolist() == [True]
    assert ts.terminated.tolist() == [False]
    assert ts.final_observation[0, 1] == 2


def _check_batched_steps(env, num_steps):
    """Steps ``env`` and checks every row against the script.

    Returns the number of steps on which some but not all rows ended.
    """
    ts = env.reset()
    n = env.num_envs
    prev = ts.observation.clone()
    mixed = 0
    for _ in range(num_steps):
        ts = env.step(torch.arange(n) % 2)
        # Every step is a real transition: reward 1 everywhere.
        assert ts.reward.tolist() == [1.0] * n
        done = ts.done
        assert (ts.final_observation is None) == (not done.any())
        nxt = ts.next_observation()
        for i in range(n):
            ep, st = int(prev[i, 0]), int(prev[i, 1])
            assert nxt[i].tolist() == [ep, st + 1], (i, prev[i], nxt[i])
            ended = st + 1 == _episode_end_step(ep)
            assert bool(done[i]) == ended
            assert bool(ts.terminated[i]) == (ended and
                                              _is_terminated(ep, st + 1))
            assert bool(ts.truncated[i]) == (ended and
                                             not _is_terminated(ep, st + 1))
            if ended:
                assert ts.observation[i].tolist() == [ep + 1, 0]
            else:
                assert ts.observation[i].tolist() == [ep, st + 1]
                if ts.final_observation is not None:
                    # Rows that did not end hold the regular observation.
                    assert ts.final_observation[i].tolist() == [ep, st + 1]
        mixed += int(done.any() and not done.all())
        prev = ts.observation.clone()
    return mixed


def test_batched_next_observation_mixed_rows(envs):
    """In a batch, ended rows give final obs and others the regular one."""
    env = envs(MIXED_ID, num_envs=3, seed=11)
    first = env.reset(seed=11).observation[:, 0].long() % 3
    # Seeds 11, 12, 13 start the envs in different phases of (2, 3, 5).
    assert len(set(first.tolist())) > 1, first
    assert _check_batched_steps(env, 15) > 0


def test_unknown_env_id_raises_alf_error():
    """An unknown id raises AlfError naming it and suggesting close ids."""
    with pytest.raises(AlfError, match="alf_test/Scripted-v9") as info:
        suite_gym.load("alf_test/Scripted-v9")
    assert TERM_ID in str(info.value)
    with pytest.raises(AlfError, match="NoSuchEnvAtAll-v0"):
        suite_gym.load("NoSuchEnvAtAll-v0")


@pytest.mark.parametrize("steps", [-5, 0, 2.5, True, "10"])
def test_bad_max_episode_steps_is_refused(steps):
    with pytest.raises(AlfError) as info:
        suite_gym.load("CartPole-v1", max_episode_steps=steps)
    msg = str(info.value).splitlines()[0]
    assert f"load.max_episode_steps={steps!r}" in msg, msg
    assert "positive integer" in msg and "(500)" in msg


def test_env_kwarg_the_environment_does_not_take_is_refused():
    with pytest.raises(AlfError) as info:
        suite_gym.load("CartPole-v1", env_kwargs={"foo": 1})
    msg = str(info.value).splitlines()[0]
    assert "load.env_kwargs={'foo': 1}" in msg and "'foo'" in msg, msg
    assert "sutton_barto_reward, render_mode" in msg  # what is valid
    with pytest.raises(AlfError, match="must be a dict"):
        suite_gym.load("CartPole-v1", env_kwargs=[("foo", 1)])


def test_env_kwargs_the_environment_takes_are_passed(envs):
    env = envs("CartPole-v1", env_kwargs={"sutton_barto_reward": True},
               max_episode_steps=3)
    env.reset(seed=0)
    ts = env.step(torch.zeros(1, dtype=torch.int64))
    assert ts.reward.item() == 0.0  # Sutton and Barto: 0 while upright


def test_seed_gives_reproducible_first_observations(envs):
    """load(seed=s) gives the same first observations; other seeds differ."""
    a = envs(MIXED_ID, num_envs=2, seed=5).reset().observation
    b = envs(MIXED_ID, num_envs=2, seed=5).reset().observation
    c = envs(MIXED_ID, num_envs=2, seed=6).reset().observation
    torch.testing.assert_close(a, b)
    assert a[0, 0] != a[1, 0]  # env i gets seed + i
    assert not torch.equal(a, c)
    # reset(seed=) on an existing environment gives the same as load(seed=).
    env = envs(MIXED_ID, num_envs=2)
    env.reset()
    torch.testing.assert_close(env.reset(seed=5).observation, a)


def test_asynchronous_matches_semantics(envs):
    """asynchronous=True (2 spawned workers) follows the same step script."""
    env = envs(MIXED_ID, num_envs=2, seed=21, asynchronous=True,
               wrappers=(register_in_worker, ))
    sync = envs(MIXED_ID, num_envs=2, seed=21)
    assert _check_batched_steps(env, 6) >= 0
    torch.testing.assert_close(env.reset(seed=21).observation,
                               sync.reset(seed=21).observation)


@pytest.mark.timeout(60)
def test_asynchronous_with_runtime_registered_id(envs):
    """An id registered in this process also works with asynchronous=True."""
    env = envs(MIXED_ID, num_envs=2, seed=21, asynchronous=True)
    assert env.reset().observation.shape == (2, 2)


def _parent_death_signal() -> int:
    value = ctypes.c_int(0)
    ctypes.CDLL("libc.so.6").prctl(2, ctypes.byref(value))  # PR_GET_...
    return value.value


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")
@pytest.mark.timeout(60)
def test_asynchronous_sets_up_only_the_workers(envs):
    """gymnasium's AsyncVectorEnv also calls the first constructor in this
    process (for the spaces): this process keeps its Ctrl-C handler and
    parent-death signal; the worker ignores Ctrl-C."""
    handler, death = signal.getsignal(signal.SIGINT), _parent_death_signal()
    env = envs("CartPole-v1", num_envs=1, asynchronous=True)
    assert signal.getsignal(signal.SIGINT) is handler
    assert _parent_death_signal() == death
    with open(f"/proc/{env._env.processes[0].pid}/status") as f:
        ignored = next(ln for ln in f if ln.startswith("SigIgn:")).split()[1]
    assert int(ignored, 16) & (1 << (signal.SIGINT - 1))


# ---- the trainer's unroll --------------------------------------------------


@pytest.fixture
def restore_torch_globals():
    """The trainer seeds torch and sets its thread count; undo both."""
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        yield
    torch.set_num_threads(threads)


def test_trainer_unroll_stores_true_transitions(tmp_path,
                                                restore_torch_globals):
    """Stored next_observation follows observation within one episode, and
    exactly the rows ending an episode are flagged."""
    from alf.algorithms.ppo_algorithm import PPOAlgorithm
    from alf.data_structures import Experience
    from alf.trainers.trainer import Trainer
    from alf.trainers.trainer_config import TrainerConfig

    t_len, b = 14, 3
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, env_name=MIXED_ID,
                        num_envs=b, unroll_length=t_len, minibatch_size=21,
                        num_epochs=1,
                        num_env_steps=t_len * b, num_eval_episodes=1,
                        eval_interval=0)
    trainer = Trainer(root_dir=str(tmp_path), config=cfg)
    trainer._build()
    try:
        trainer._collector.start(trainer.algorithm, trainer._episodes,
                                 env_seed=0, version=0)
        first_obs = trainer._collector._obs.clone()
        trainer._collector.collect()
        exp = trainer.algorithm.replay_buffer.gather_all()
        assert isinstance(exp, Experience)
        assert exp.observation.shape == (t_len, b, 2)
        assert exp.next_observation.shape == (t_len, b, 2)
        assert exp.terminated.shape == exp.truncated.shape == (t_len, b)
        assert exp.reward.tolist() == [[1.0] * b] * t_len
        torch.testing.assert_close(exp.observation[0], first_obs)

        obs, nxt = exp.observation.long(), exp.next_observation.long()
        done = exp.terminated | exp.truncated
        counts = {"term": 0, "trunc": 0}
        for t in range(t_len):
            for i in range(b):
                ep, st = obs[t, i].tolist()
                # The transition stays inside one episode.
                assert nxt[t, i].tolist() == [ep, st + 1], (t, i)
                last = st + 1 == _episode_end_step(ep)
                assert bool(done[t, i]) == last, (t, i, ep, st)
                term = last and _is_terminated(ep, st + 1)
                assert bool(exp.terminated[t, i]) == term, (t, i)
                assert bool(exp.truncated[t, i]) == (last and not term)
                counts["term"] += term
                counts["trunc"] += last and not term
                if t + 1 < t_len:
                    expected = [ep + 1, 0] if last else [ep, st + 1]
                    assert obs[t + 1, i].tolist() == expected, (t, i)
        # The example really contains both kinds of boundaries.
        assert counts["term"] > 0 and counts["trunc"] > 0, counts
        # The unroll is trainable end to end.
        stats = trainer.algorithm.train_iter(1.0)
        assert torch.isfinite(stats["loss"])
        assert trainer.algorithm.replay_buffer.num_steps == 0
    finally:
        trainer._close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["step", "reset"])
def test_a_killed_worker_is_a_retryable_error_and_close_ends_the_rest(
        envs, call):
    """Before, gymnasium's broken pipe surfaced as a traceback, and closing
    the environments waited forever for a step's answers."""
    env = envs("CartPole-v1", num_envs=3, asynchronous=True)
    env.reset(seed=0)
    workers = list(env._env.processes)
    os.kill(workers[1].pid, signal.SIGKILL)
    workers[1].join(10)
    with pytest.raises(suite_gym.EnvironmentWorkerDied, match=re.escape(
            "environment worker 1 of 3 was killed by SIGKILL")) as info:
        if call == "step":
            env.step(torch.zeros(3, dtype=torch.long))
        else:
            env.reset(seed=1)
    assert info.value.retryable
    # Whose: the trainer's and the evaluator's workers count the same way.
    whose = info.value.whose("rank 1's training")
    assert str(whose).startswith("rank 1's training environment worker 1 "
                                 "of 3 was killed by SIGKILL"), whose
    assert whose.retryable
    start = time.time()
    env.close()
    assert time.time() - start < 15
    assert not any(w.is_alive() for w in workers)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:.*ERROR:")  # gymnasium's, of the worker
@pytest.mark.parametrize("call", ["step", "reset"])
def test_an_exception_in_a_worker_is_a_retryable_error_naming_it(
        envs, call):
    """Before, a worker's exception came back as itself, a traceback that
    ended training without saving anything."""
    env = envs(RAISE_ID, num_envs=3, asynchronous=True,
               wrappers=(register_in_worker, ),
               env_kwargs=dict(raise_in=call))
    workers = list(env._env.processes)
    with pytest.raises(suite_gym.EnvironmentRaised) as info:
        env.reset(seed=6)  # worker 1 gets seed 7
        env.step(torch.zeros(3, dtype=torch.long))
    assert str(info.value) == (
        f"environment worker 1 of 3 raised ValueError: scripted failure in "
        f"{'reset (seed 7)' if call == 'reset' else 'step'} (its traceback "
        "is printed above)")
    assert info.value.retryable
    assert str(info.value.whose("training")).startswith(
        "training environment worker 1 of 3 raised ValueError")
    with pytest.raises(AlfError, match="can only be closed"):
        env.step(torch.zeros(3, dtype=torch.long))
    env.close()
    assert not any(w.is_alive() for w in workers)


def test_an_exception_in_process_is_named_and_its_traceback_logged(
        envs, caplog):
    env = envs(RAISE_ID, num_envs=2, asynchronous=False)
    env.reset(seed=7)
    with pytest.raises(suite_gym.EnvironmentRaised) as info:
        env.step(torch.zeros(2, dtype=torch.long))
    assert str(info.value) == (
        "an in-process environment raised ValueError: scripted failure in "
        "step (its traceback is logged above)")
    assert "in step\n    raise ValueError" in caplog.text, caplog.text
    assert str(info.value.whose("rank 1's training")).startswith(
        "an in-process environment of rank 1's training raised ")
    assert str(info.value.renamed(str, "evaluation environment 2")) \
        .startswith("evaluation environment 2 raised ValueError")


def test_an_environments_own_connection_error_is_not_a_broken_pipe(envs,
                                                                   caplog):
    """A simulator's client raising ConnectionResetError read as "a pipe to
    the environment workers broke", where there are no workers."""
    env = envs(TERM_ID, num_envs=1, asynchronous=False)
    env.reset(seed=0)

    def refused(*args):
        raise ConnectionResetError("the simulator closed its socket")
    env._env.step = refused
    with pytest.raises(suite_gym.EnvironmentRaised) as info:
        env.step(torch.zeros(1, dtype=torch.long))
    assert str(info.value).startswith(
        "an in-process environment raised ConnectionResetError: the "
        "simulator closed its socket"), info.value


def test_several_workers_are_each_renamed():
    error = suite_gym.EnvironmentRaised(
        "environment workers 0, 2 of 3 raised exceptions, the last "
        "ValueError: x")
    renamed = error.renamed(lambda i: f"evaluation environment 4's worker "
                            f"{i} of 3")
    assert type(renamed) is suite_gym.EnvironmentRaised
    assert str(renamed).startswith(
        "evaluation environment 4's worker 0 of 3, evaluation environment "
        "4's worker 2 of 3 raised exceptions"), renamed
    assert type(error.whose("training")) is suite_gym.EnvironmentRaised


def test_an_error_that_names_its_bad_value_passes_unchanged(envs):
    """An `AlfError` (a watch's, or a wrapper's refusal) is not an
    environment's failure."""
    env = envs(TERM_ID, num_envs=1, asynchronous=False)
    env.reset(seed=0)

    def refuse(*args):
        raise AlfError("a refusal")
    env._env.step = refuse
    with pytest.raises(AlfError) as info:
        env.step(torch.zeros(1, dtype=torch.long))
    assert type(info.value) is AlfError


class _Recorder(StepWatch):
    """A watch that records what a step tells it, and gives the step up
    after ``give_up`` reports."""

    def __init__(self, give_up=None):
        self.waiting_calls, self.steps, self._give_up = [], [], give_up

    def waiting(self, workers, seconds):
        self.waiting_calls.append((list(workers), seconds))
        if self._give_up and len(self.waiting_calls) >= self._give_up:
            raise KeyboardInterrupt

    def stepped(self, seconds):
        self.steps.append(seconds)


@pytest.mark.timeout(60)
def test_a_watched_step_names_a_stopped_worker_and_closes_once_given_up(
        envs):
    """Before, a step waited in a pipe's recv for a stopped (SIGSTOP)
    worker forever, and closing the environments after an interrupt
    waited for its answer forever too."""
    env = envs("CartPole-v1", num_envs=3, asynchronous=True)
    assert len(env.worker_pids) == 3
    watch = _Recorder(give_up=2)
    env.watch(watch)
    env.reset(seed=0)
    action = torch.zeros(3, dtype=torch.long)
    for _ in range(5):
        env.step(action)
    # The reset is watched too (a worker can hang there as well).
    assert len(watch.steps) == 6 and watch.waiting_calls == []
    os.kill(env.worker_pids[1], signal.SIGSTOP)
    start = time.time()
    with pytest.raises(KeyboardInterrupt):
        env.step(action)
    assert 1.5 < time.time() - start < 10
    assert [w for w, _ in watch.waiting_calls] == [[1], [1]]
    assert 0.9 < watch.waiting_calls[0][1] < watch.waiting_calls[1][1]
    with pytest.raises(AlfError, match="they can only be closed"):
        env.step(action)  # its answers may still come: not reusable
    workers = list(env._env.processes)
    start = time.time()
    env.close()
    assert time.time() - start < 15
    assert not any(w.is_alive() for w in workers)


def test_in_process_environments_have_no_workers_to_watch(envs):
    env = envs("CartPole-v1", num_envs=2)
    assert env.worker_pids == []
    watch = _Recorder()
    env.watch(watch)  # ignored
    env.reset(seed=0)
    env.step(torch.zeros(2, dtype=torch.long))
    assert watch.steps == []


@pytest.mark.timeout(60)
def test_a_slowed_environment_is_watched_through(envs):
    """The straggler wrapper forwards its workers: the watch was lost."""
    from alf.environments.straggler import SlowedEnvironment
    inner = envs("CartPole-v1", num_envs=2, asynchronous=True)
    slowed = SlowedEnvironment(inner, 1.0)
    assert slowed.worker_pids == inner.worker_pids and slowed.worker_pids
    watch = _Recorder()
    slowed.watch(watch)
    slowed.reset(seed=0)
    slowed.step(torch.zeros(2, dtype=torch.long))
    assert len(watch.steps) == 2


class _EchoStartEnv(gym.Env):
    """Discrete(3, start=5) actions; the observation is the last action."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1, ),
                                                np.float32)
        self.action_space = gym.spaces.Discrete(3, start=5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(int(action)), action
        return np.array([action], np.float32), 0.0, False, False, {}


def test_a_discrete_space_with_a_start_is_offset_into_the_environment(envs):
    # Algorithms act in 0..n-1; before, those indices reached an
    # environment whose actions are 5..7 and it stepped with invalid ones.
    if "alf_test/EchoStart-v0" not in gym.registry:
        gym.register("alf_test/EchoStart-v0", entry_point=_EchoStartEnv)
    env = envs("alf_test/EchoStart-v0", num_envs=3, seed=0)
    assert env.action_space == gym.spaces.Discrete(3)
    env.reset()
    ts = env.step(torch.tensor([0, 1, 2]))
    assert ts.observation[:, 0].tolist() == [5.0, 6.0, 7.0]


class _BrokenInit(gym.Env):

    def __init__(self):
        raise RuntimeError("my simulator failed to start")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_environment_whose_constructor_raises_is_one_line(asynchronous):
    # gymnasium builds one in this process for AsyncVectorEnv too.
    if "alf_test/BrokenInit-v0" not in gym.registry:
        gym.register("alf_test/BrokenInit-v0", entry_point=_BrokenInit)
    with pytest.raises(AlfError, match=r"^environment alf_test/BrokenInit-v0"
                       r" could not be built: RuntimeError: my simulator "
                       r"failed to start \(its traceback is logged above\)"):
        suite_gym.load("alf_test/BrokenInit-v0", num_envs=2,
                       asynchronous=asynchronous)


def test_a_constructor_failing_in_an_actor_names_where_it_raised(
        monkeypatch):
    # Each actor would log the same traceback: its one line says where.
    from alf.environments import env_fn
    if "alf_test/BrokenInit-v0" not in gym.registry:
        gym.register("alf_test/BrokenInit-v0", entry_point=_BrokenInit)
    monkeypatch.setattr(env_fn, "in_environment_process", lambda: True)
    monkeypatch.setattr(suite_gym, "in_environment_process", lambda: True)
    with pytest.raises(suite_gym.EnvironmentNotBuilt, match=r"failed to "
                       r"start \(raised at test_suite_gym.py:\d+\)") as info:
        suite_gym.load("alf_test/BrokenInit-v0")
    assert info.value.retryable  # a simulator may start on a restart


@pytest.mark.parametrize("env_kwargs", [None, {"continuous": True}])
def test_a_missing_extra_is_one_line_with_or_without_env_kwargs(env_kwargs):
    """With env_kwargs, the check of their names imported the entry point
    first, and gymnasium's DependencyNotInstalled escaped as a traceback."""
    if "alf_test/NeedsBox2D-v0" not in gym.registry:
        gym.register("alf_test/NeedsBox2D-v0",
                     entry_point="needs_box2d:Lander")
    with pytest.raises(AlfError, match=r"^environment alf_test/NeedsBox2D-v0 "
                       r"cannot be built: DependencyNotInstalled: Box2D is "
                       r"not installed") as info:
        suite_gym.load("alf_test/NeedsBox2D-v0", env_kwargs=env_kwargs)
    assert not info.value.retryable  # a restart would not install it


@pytest.mark.parametrize("bad", [None, 5])
def test_an_environment_id_that_is_not_a_string_is_one_line(bad):
    with pytest.raises(AlfError, match=rf"^environment id {bad} is not a "
                       "string"):
        suite_gym.load(bad)


def test_an_atari_id_without_ale_py_names_the_package():
    if any(k.startswith("ALE/") for k in gym.registry):
        pytest.skip("ale-py is installed and imported here")
    with pytest.raises(AlfError, match=r"^unknown environment id "
                       r"'ALE/Pong-v5'; Atari ids are registered by the "
                       r"ale-py package"):
        suite_gym.check_env_id("ALE/Pong-v5")


def test_rendering_an_environment_that_takes_no_render_mode_says_so():
    """It said "load.env_kwargs={'render_mode': 'rgb_array'}: ... takes no
    argument 'render_mode'", a binding the user never wrote."""
    if "alf_test/EchoStart-v0" not in gym.registry:
        gym.register("alf_test/EchoStart-v0", entry_point=_EchoStartEnv)
    with pytest.raises(AlfError, match=r"^alf_test/EchoStart-v0 cannot "
                       r"render frames: its constructor takes no "
                       r"render_mode"):
        suite_gym.load("alf_test/EchoStart-v0", render=True)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_flatten_observation_makes_a_tuple_space_an_array(envs,
                                                          asynchronous):
    # What the networks' refusal of a Tuple space names; a gin reference
    # to gymnasium's class itself could not be pickled for the workers.
    env = envs("Blackjack-v1", num_envs=2, seed=0, asynchronous=asynchronous,
               wrappers=(suite_gym.flatten_observation, ))
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert env.reset().observation.shape == (2, 32 + 11 + 2)
