"""The evaluator: episodes played without a step beyond their end, queued
at each environment's own pace, and `set_aside_later_rows` (a run resumed
from an older checkpoint keeps eval.csv one row per step, in order, and
loses no row, issue 11). Exactness: test_evaluator_exactness.py."""
import concurrent.futures
import csv
import os
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.data_structures import AlgStep
from alf.environments import env_fn, suite_gym
from alf.trainers.evaluator import (Evaluator, EvaluationStopped,
                                    append_eval_csv,
                                    evaluate_together, evaluate_variants,
                                    make_evaluator, read_eval_csv,
                                    set_aside_later_rows)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _log(root, steps):
    for s in steps:
        append_eval_csv(str(root), s, {"average_return": s / 10,
                                       "average_episode_length": 1.0})


def test_rows_after_the_checkpoint_are_moved_aside(tmp_path):
    _log(tmp_path, [64, 128, 192, 256])
    before = _rows(tmp_path / "eval.csv")
    moved = set_aside_later_rows(str(tmp_path), 128)
    assert moved is not None and (moved.later, moved.unreadable) == (2, 0)
    aside = moved.path
    assert os.path.basename(aside).startswith("eval-discarded-")
    assert _rows(tmp_path / "eval.csv") == before[:3]  # header, 64, 128
    assert _rows(aside) == [before[0]] + before[3:]  # header, 192, 256
    _log(tmp_path, [192])  # the resumed run goes on: still monotone
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"] == [
        64, 128, 192]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["eval.csv", os.path.basename(aside)])  # no .tmp left


def test_nothing_to_move_changes_nothing(tmp_path):
    assert set_aside_later_rows(str(tmp_path), 10) is None  # no eval.csv
    _log(tmp_path, [64, 128])
    before = (tmp_path / "eval.csv").read_bytes()
    assert set_aside_later_rows(str(tmp_path), 128) is None
    assert (tmp_path / "eval.csv").read_bytes() == before
    assert os.listdir(tmp_path) == ["eval.csv"]


def test_a_second_set_aside_never_overwrites_the_first(tmp_path):
    _log(tmp_path, [64, 128])
    first = set_aside_later_rows(str(tmp_path), 64).path
    _log(tmp_path, [128])
    second = set_aside_later_rows(str(tmp_path), 64).path
    assert first != second
    assert len(_rows(first)) == len(_rows(second)) == 2


def test_a_row_cut_short_by_a_crash_goes_aside(tmp_path):
    _log(tmp_path, [64, 128])
    with open(tmp_path / "eval.csv", "a") as f:
        f.write("19")  # half a row
    moved = set_aside_later_rows(str(tmp_path), 128)
    assert (moved.later, moved.unreadable) == (0, 1)
    assert _rows(moved.path)[1:] == [["19"]]
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"] == [64, 128]


def test_a_damaged_byte_goes_aside_as_it_was_and_the_log_goes_on(tmp_path):
    """A row with a byte that is not UTF-8 was a UnicodeDecodeError
    traceback on resuming; it is unreadable, so it goes aside, byte for
    byte, and rows are appended after it."""
    _log(tmp_path, [64, 128])
    path = tmp_path / "eval.csv"
    with open(path, "ab") as f:
        f.write(b"192,\xc1\xf9,1.0\n")
    moved = set_aside_later_rows(str(tmp_path), 192)
    assert (moved.later, moved.unreadable) == (0, 1)
    with open(moved.path, "rb") as f:
        assert f.read().splitlines()[1] == b"192,\xc1\xf9,1.0"
    _log(tmp_path, [192])
    append_eval_csv(str(tmp_path), 256, {"average_return": 1.0,
                                         "new_metric": 3.0})  # rewritten
    assert read_eval_csv(str(path))["env_steps"] == [64, 128, 192, 256]


def test_a_row_without_its_env_steps_goes_aside(tmp_path):
    _log(tmp_path, [0, 64])
    with open(tmp_path / "eval.csv", "a") as f:
        f.write(",1.0,1.0\ninf,1.0,1.0\n")
    moved = set_aside_later_rows(str(tmp_path), 64)
    assert (moved.later, moved.unreadable) == (0, 2)
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"] == [0, 64]


def test_a_file_without_a_header_goes_aside_whole(tmp_path):
    """Random bytes where eval.csv was: the resume moved no row and then
    failed reading its header."""
    path = tmp_path / "eval.csv"
    junk = bytes(range(256)) * 2
    path.write_bytes(junk)
    moved = set_aside_later_rows(str(tmp_path), 0)
    assert moved.whole and not path.exists()
    with open(moved.path, "rb") as f:
        assert f.read() == junk
    _log(tmp_path, [64])
    assert read_eval_csv(str(path))["env_steps"] == [64]


def test_a_metric_first_seen_after_a_resume_widens_the_header(tmp_path):
    """A run resumed with ``calibrate_offsets`` reports ``offset_0`` from
    then on: eval.csv keeps it (it used to drop it silently), its earlier
    rows read it as NaN, and the rewrite leaves no temporary file."""
    import math
    _log(tmp_path, [64, 128])
    append_eval_csv(str(tmp_path), 192, {"average_return": 1.5,
                                         "average_episode_length": 2.0,
                                         "offset_0": -0.1})
    rows = _rows(tmp_path / "eval.csv")
    assert rows[0][-1] == "offset_0"
    assert [len(r) for r in rows] == [len(rows[0])] * 4
    got = read_eval_csv(str(tmp_path / "eval.csv"))
    assert got["env_steps"] == [64, 128, 192]
    assert math.isnan(got["offset_0"][0]) and got["offset_0"][2] == -0.1
    assert got["average_return"] == [6.4, 12.8, 1.5]
    _log(tmp_path, [256])  # a later row without it: an empty field
    assert math.isnan(read_eval_csv(str(tmp_path / "eval.csv"))[
        "offset_0"][3])
    assert os.listdir(tmp_path) == ["eval.csv"]


def test_eval_csv_has_unix_line_ends_as_written_and_rewritten(tmp_path):
    """csv's default "\r\n" left a carriage return on every last value
    that ``cut`` or ``awk`` read."""
    path = tmp_path / "eval.csv"
    _log(tmp_path, [64, 128])
    assert path.read_bytes().count(b"\n") == 3
    assert b"\r" not in path.read_bytes()
    append_eval_csv(str(tmp_path), 192, {"average_return": 1.0,
                                         "new_metric": 3.0})  # rewritten
    set_aside_later_rows(str(tmp_path), 128)  # rewritten, and aside
    for name in os.listdir(tmp_path):
        assert b"\r" not in (tmp_path / name).read_bytes(), name
    assert len(os.listdir(tmp_path)) == 2


def test_an_eval_csv_saved_with_a_bom_is_read_and_appended_to(tmp_path):
    """A file saved by a spreadsheet starts with a byte-order mark, which
    hid the header's first column: every row was skipped."""
    path = tmp_path / "eval.csv"
    path.write_bytes(b"\xef\xbb\xbfenv_steps,average_return,"
                     b"average_episode_length\n64,6.4,1.0\n")
    append_eval_csv(str(tmp_path), 128, {"average_return": 12.8,
                                         "average_episode_length": 1.0})
    got = read_eval_csv(str(path))
    assert got["env_steps"] == [64, 128], got
    assert got["average_return"] == [6.4, 12.8]
    assert set_aside_later_rows(str(tmp_path), 64) is not None
    assert read_eval_csv(str(path))["env_steps"] == [64]


def test_widening_keeps_a_row_cut_short_unreadable(tmp_path):
    """A crash's half row is not padded into a row of NaN metrics: it is
    still left out, and set aside on the next resume."""
    _log(tmp_path, [64])
    with open(tmp_path / "eval.csv", "a") as f:
        f.write("19\r\n")
    append_eval_csv(str(tmp_path), 128, {"average_return": 1.0,
                                         "new_metric": 3.0})
    assert _rows(tmp_path / "eval.csv")[2] == ["19"]
    skipped = []
    got = read_eval_csv(str(tmp_path / "eval.csv"), skipped)
    assert got["env_steps"] == [64, 128] and got["new_metric"][1] == 3.0
    assert skipped == ["env_steps 19"]


# ---- playing the episodes ---------------------------------------------


class _Counted(gym.Env):
    """Episodes of ``length`` steps (reward 1 a step, success at the end);
    counts its steps and resets, and sleeps ``delay`` s a step (a slow
    simulator, which waits without holding the GIL)."""

    observation_space = gym.spaces.Box(-1, 1, (1, ), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length, delay=0.0):
        self.length, self.delay = length, delay
        self.steps = self.resets = 0
        self.seeds = []  # the seeds it was reset with

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.seeds.append(seed)
        self.t, self.resets = 0, self.resets + 1
        return np.full(1, self.np_random.uniform(-1, 1), np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        self.t, self.steps = self.t + 1, self.steps + 1
        done = self.t == self.length
        return (np.zeros(1, np.float32), 1.0, done, False,
                {"is_success": True} if done else {})


def _group(lengths, delay=0.0):
    vec = gym.vector.SyncVectorEnv(
        [lambda n=n: _Counted(n, delay) for n in lengths],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return suite_gym.GymEnvironment(vec, episode_info={
        "success_rate": "is_success"})


def _sub_envs(group):
    return group._env.envs


class _FirstObservation:
    """Acts 1."""

    def observe(self, obs, update=True):
        return obs

    def predict_step(self, obs):
        return AlgStep(output=torch.ones(obs.shape[0], dtype=torch.int64))


def test_an_ended_episode_takes_no_further_step():
    lengths = [2, 7, 4]
    groups = [_group([n]) for n in lengths]
    evaluator = Evaluator(groups, seed=3)
    out = evaluator.evaluate(_FirstObservation())
    assert out["average_episode_length"] == pytest.approx(sum(lengths) / 3)
    assert out["average_return"] == pytest.approx(sum(lengths) / 3)
    assert out["success_rate"] == 1.0
    for group, n in zip(groups, lengths):
        env = _sub_envs(group)[0]
        # Its reset, and the same-step autoreset of the step that ended it.
        assert (env.steps, env.resets) == (n, 2)
    evaluator.close()


def test_groups_play_what_one_batch_plays():
    """The same episode starts (environment i seeded with seed + i) and
    the same results as one batched environment, which steps every
    environment until the longest episode ends (the negative control)."""
    lengths = [2, 7, 4]
    single = _FirstObservation()
    groups = [_group([n]) for n in lengths]
    out_groups = Evaluator(groups, seed=3).evaluate(single)
    batched_env = _group(lengths)
    batched = _FirstObservation()
    out_batched = Evaluator(batched_env, seed=3).evaluate(batched)
    assert out_groups == out_batched
    assert [_sub_envs(g)[0].seeds for g in groups] == [[3], [4], [5]]
    assert [e.seeds for e in _sub_envs(batched_env)] == [[3], [4], [5]]
    assert [e.steps for e in _sub_envs(batched_env)] == [7, 7, 7]
    assert [e.resets for e in _sub_envs(batched_env)] == [4, 2, 2]


def test_slow_groups_step_concurrently():
    delay, length, n = 0.05, 6, 4
    evaluator = Evaluator([_group([length], delay) for _ in range(n)])
    start = time.perf_counter()
    evaluator.evaluate(_FirstObservation())
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5 * n * length * delay, elapsed  # serial: 1.2 s
    evaluator.close()


# ---- more episodes than environments: a queue ------------------------


class _BySeed(_Counted):
    """An episode whose length its seed sets (``lengths[seed]``), as a
    simulator's scenario sets how long it plays."""

    def __init__(self, lengths, delay=0.0):
        super().__init__(0, delay)
        self.lengths = lengths

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.length = self.lengths[seed]
        return super().reset(seed=seed, options=options)


def _by_seed(lengths, n, delay=0.0):
    return [suite_gym.GymEnvironment(gym.vector.SyncVectorEnv(
        [lambda: _BySeed(lengths, delay)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), episode_info={
            "success_rate": "is_success"}) for _ in range(n)]


# Episodes 0-4 of seed 3: one long, four short.
_LENGTHS = {3: 10, 4: 2, 5: 3, 6: 4, 7: 1}


def test_an_environment_whose_episode_ends_starts_the_next():
    # 5 episodes in 2 environments: while the first plays its 10 steps,
    # the second plays the four short ones one after another (rounds
    # would have waited for the long one twice: 15 steps).
    groups = _by_seed(_LENGTHS, 2)
    evaluator = Evaluator(groups, seed=3, num_episodes=5)
    assert evaluator.num_episodes == 5
    out = evaluator.evaluate(_FirstObservation())
    assert out["average_episode_length"] == pytest.approx(20 / 5)
    assert out["success_rate"] == 1.0
    # Every episode played once, whichever environment took it (which one
    # does depends on how the threads run; the timing is tested below).
    first, second = (_sub_envs(g)[0] for g in groups)
    assert sorted(first.seeds + second.seeds) == [3, 4, 5, 6, 7]
    assert first.steps + second.steps == 20
    # Each episode started from its own seed: as 5 environments play them.
    wide = _by_seed(_LENGTHS, 5)
    assert Evaluator(wide, seed=3).evaluate(_FirstObservation()) == out
    assert [_sub_envs(g)[0].seeds for g in wide] == [[3], [4], [5], [6],
                                                     [7]]
    evaluator.close()


# The timing tests below compare a play with its negative control, timed
# in the same test on the same environments: each step's wall time is its
# delay plus a round trip between threads (a few ms on a loaded 2-core
# machine, more at times), which a bound on the wall time alone had to
# guess; the control pays that round trip too, at least as often.


def _seconds(play):
    """Wall seconds ``play()`` takes."""
    start = time.perf_counter()
    play()
    return time.perf_counter() - start


def _against(play, control):
    """(seconds of ``play``, seconds of ``control``): ``play`` timed before
    and after ``control``, the lesser kept (a burst of the machine's load
    rarely lands on both)."""
    first = _seconds(play)
    against = _seconds(control)
    return min(first, _seconds(play)), against


def test_a_queue_takes_the_longest_episode_not_the_sum_of_rounds():
    delay = 0.05
    groups = _by_seed(_LENGTHS, 2, delay)
    pool = concurrent.futures.ThreadPoolExecutor(2)
    queue = Evaluator(groups, seed=3, num_episodes=5, pool=pool)
    # The control: the same 5 episodes in rounds of 2, each round waiting
    # for its longest episode: (10, 2), (3, 4), (1).
    rounds = [Evaluator(groups, seed=s, num_episodes=k, pool=pool)
              for s, k in ((3, 2), (5, 2), (7, 1))]
    queued, in_rounds = _against(
        lambda: queue.evaluate(_FirstObservation()),
        lambda: [r.evaluate(_FirstObservation()) for r in rounds])
    # 10 steps against 15 (2/3, round trips included); a queue played in
    # rounds reads ~1.
    assert queued < 0.85 * in_rounds, (queued, in_rounds)
    queue.close()


class _Uneven(_Counted):
    """`_Counted` whose steps sleep ``delays[t % len(delays)]``."""

    def __init__(self, length, delays):
        super().__init__(length)
        self.delays = delays

    def step(self, action):
        time.sleep(self.delays[self.t % len(self.delays)])
        return super().step(action)


def test_no_environment_waits_for_a_slower_ones_step():
    # Two environments whose slow steps alternate (a simulator's step
    # time varies with what it simulates): in lock-step every step waits
    # for the slow one (10 x 0.06 s); at their own pace each takes 5 x 0.06.
    delays = ((0.06, 0.0), (0.0, 0.06))

    def group(*paces):
        return suite_gym.GymEnvironment(gym.vector.SyncVectorEnv(
            [lambda d=d: _Uneven(10, d) for d in paces],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))

    evaluator = Evaluator([group(d) for d in delays], seed=0)
    # The control: both in one group, which steps them in lock-step.
    lock_step = Evaluator(group(*delays), seed=0)
    outs = []
    own_pace, in_lock_step = _against(
        lambda: outs.append(evaluator.evaluate(_FirstObservation())),
        lambda: outs.append(lock_step.evaluate(_FirstObservation())))
    assert [o["average_episode_length"] for o in outs] == [10] * 3
    # 0.3 s against 0.6 s (plus 10 round trips each: 0.5 on a quiet
    # machine); groups in lock-step read ~1.
    assert own_pace < 0.75 * in_lock_step, (own_pace, in_lock_step)
    evaluator.close()
    lock_step.close()


def test_a_batched_group_past_the_last_episode_is_not_counted():
    # One group of 2 environments, 3 episodes: the second round's second
    # episode is played (the group steps together) and left out.
    group = _group([2, 8])
    out = Evaluator(group, seed=0, num_episodes=3).evaluate(
        _FirstObservation())
    assert out["average_episode_length"] == pytest.approx((2 + 8 + 2) / 3)


def test_together_the_queue_of_one_evaluator_does_not_change_the_other():
    def pair():
        return (Evaluator([_group([n]) for n in (2, 5)], seed=3),
                Evaluator(_by_seed(_LENGTHS, 2), seed=3, num_episodes=5))

    alone = [e.evaluate(_FirstObservation()) for e in pair()]
    train, held_out = pair()
    assert evaluate_together([train, held_out], _FirstObservation()) == alone
    assert alone[1]["average_episode_length"] == pytest.approx(20 / 5)
    assert sorted(sum((_sub_envs(g)[0].seeds for g in held_out._envs), [])
                  ) == [3, 4, 5, 6, 7]


class _Offset:
    """Acts ``offset`` (a Box action); `evaluate_variants` sets it."""

    offset = 0.0

    def observe(self, obs, update=True):
        return obs

    def predict_step(self, obs):
        return AlgStep(output=torch.full((obs.shape[0], 1), self.offset))


class _Paid(_BySeed):
    """`_BySeed` with a one-dimensional Box action, paid as its reward."""

    action_space = gym.spaces.Box(-5, 5, (1, ), np.float32)

    def step(self, action):
        obs, _, done, truncated, info = super().step(action)
        return obs, float(action[0]), done, truncated, info


def test_variants_queue_together_and_each_acts_as_its_own():
    lengths = {3: 10, 4: 2, 5: 3}

    def evaluator():
        return Evaluator([suite_gym.GymEnvironment(gym.vector.SyncVectorEnv(
            [lambda: _Paid(lengths)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
            for _ in range(2)], seed=3, num_episodes=3)

    policy = _Offset()
    offsets = (1.0, -2.0, 0.5)

    def set_to(x):
        return lambda: setattr(policy, "offset", x)

    alone = []
    for x in offsets:
        policy.offset = x
        alone.append(evaluator().evaluate(policy))
    queued = evaluator()
    got = evaluate_variants(queued, policy, [set_to(x) for x in offsets])
    assert got == alone
    assert [r["average_return"] for r in got] == pytest.approx(
        [x * 5 for x in offsets])
    # Nine episodes of 15 steps per variant in all on two environments:
    # the queue ends after 25 steps when the last 10-step episode starts
    # at 15; which environment takes an episode when both come free at
    # once is the threads' timing (28 was seen on a loaded machine). One
    # variant after another, in rounds, takes 3 x (10 + 3) = 39.
    first, second = (_sub_envs(g)[0] for g in queued._envs)
    assert sorted(first.seeds + second.seeds) == [3] * 3 + [4] * 3 + [5] * 3
    assert max(first.steps, second.steps) <= 30


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_evaluator_refuses_a_bad_episode_count(bad):
    with pytest.raises(ValueError, match="num_episodes"):
        Evaluator([_group([2])], num_episodes=bad)


class _Config:
    env_name, async_env, seed, eval_deterministic = "X", False, 0, True
    num_eval_episodes = 4


def test_make_evaluator_closes_what_it_built_when_a_load_fails():
    built, lock = [], threading.Lock()

    def load_fn(env_name, num_envs, seed, asynchronous):
        with lock:
            if len(built) == 2:
                built.append(None)
                raise RuntimeError("no simulator for you")
            group = _group([3])
            group.closed = False
            group.close = lambda g=group: setattr(g, "closed", True)
            built.append(group)
            return group

    with pytest.raises(RuntimeError, match="no simulator"):
        make_evaluator(_Config(), load_fn)
    groups = [g for g in built if g is not None]
    assert len(groups) == 3 and all(g.closed for g in groups)


def test_make_evaluator_loads_one_environment_each():
    calls = []

    def load_fn(env_name, num_envs, seed, asynchronous):
        calls.append(num_envs)
        return _group([3] * num_envs)

    evaluator = make_evaluator(_Config(), load_fn)
    assert calls == [1, 1, 1, 1] and evaluator.num_episodes == 4
    assert evaluator.evaluate(_FirstObservation())[
        "average_episode_length"] == 3
    evaluator.close()


@pytest.mark.parametrize("episodes, loads", [(6, 4), (2, 2), (None, 4)])
def test_make_evaluator_loads_at_most_num_eval_episodes(episodes, loads):
    calls = []

    def load_fn(env_name, num_envs, seed, asynchronous):
        calls.append(num_envs)
        return _group([3] * num_envs)

    evaluator = make_evaluator(_Config(), load_fn, episodes)
    assert len(calls) == loads
    assert evaluator.num_episodes == (episodes or 4)
    evaluator.close()


def test_make_evaluator_loads_evaluation_environments_on_every_thread():
    """Each load, the first in the caller's thread and the others on the
    pool's, sees `evaluation_environments` open (a suite may then build
    exact episodes); the block is closed once the evaluator is built."""
    seen = []

    def load_fn(env_name, num_envs, seed, asynchronous):
        seen.append((threading.get_ident(),
                     env_fn.loading_evaluation_environments()))
        return _group([3])

    evaluator = make_evaluator(_Config(), load_fn)
    assert [flag for _, flag in seen] == [True] * 4
    assert len({thread for thread, _ in seen}) > 1
    assert not env_fn.loading_evaluation_environments()
    evaluator.close()


@pytest.mark.timeout(120)
def test_environments_in_subprocesses_outlive_the_build():
    """Workers die with the thread that started them (PR_SET_PDEATHSIG):
    the threads that loaded them must live as long as they do."""
    class Config(_Config):
        env_name, async_env, num_eval_episodes = "CartPole-v1", True, 3

    evaluator = make_evaluator(Config(), suite_gym.load)
    try:
        time.sleep(0.5)  # time for a worker orphaned by its thread to die
        for _ in range(2):
            out = evaluator.evaluate(_FirstObservation())
            assert out["average_episode_length"] > 0
    finally:
        evaluator.close()


@pytest.mark.timeout(120)
def test_a_killed_worker_is_named_as_the_evaluations():
    """The error says which evaluation environment's worker it was (each
    environment is a vector environment of its own: "worker 0 of 1" said
    nothing)."""
    import signal

    class Config(_Config):
        env_name, async_env, num_eval_episodes = "CartPole-v1", True, 2

    evaluator = make_evaluator(Config(), suite_gym.load)
    try:
        worker = evaluator._envs[1]._env.processes[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(10)
        with pytest.raises(suite_gym.EnvironmentWorkerDied, match=(
                "^evaluation environment 1's worker was killed by "
                "SIGKILL")):
            evaluator.evaluate(_FirstObservation())
    finally:
        evaluator.close()


def test_close_closes_every_group_even_when_one_fails():
    groups = [_group([2]) for _ in range(3)]
    closed = []

    def failing():
        closed.append(0)
        raise OSError("worker gone")

    groups[0].close = failing
    for i in (1, 2):
        groups[i].close = lambda i=i: closed.append(i)
    with pytest.raises(OSError, match="worker gone"):
        Evaluator(groups).close()
    assert closed == [0, 1, 2]


# ---- training and held-out evaluations together ----------------------


def test_together_each_evaluator_gets_what_it_gets_alone():
    def pair():
        return (Evaluator([_group([n]) for n in (2, 5)], seed=3),
                Evaluator([_group([n]) for n in (4, 1, 6)], seed=11))

    alone = [e.evaluate(_FirstObservation()) for e in pair()]
    train, held_out = pair()
    together = evaluate_together([train, held_out], _FirstObservation())
    assert together == alone
    # Held-out environments start from their own evaluator's seeds.
    assert [_sub_envs(g)[0].seeds for g in held_out._envs] == [[11], [12],
                                                              [13]]
    assert together[0]["average_episode_length"] == pytest.approx(3.5)
    assert together[1]["average_episode_length"] == pytest.approx(11 / 3)


def test_together_overlaps_the_evaluators():
    delay, n = 0.05, 6
    evaluators = [Evaluator([_group([n], delay)]) for _ in range(2)]
    # The control: one after the other.
    together, apart = _against(
        lambda: evaluate_together(evaluators, _FirstObservation()),
        lambda: [e.evaluate(_FirstObservation()) for e in evaluators])
    # 0.3 s against 0.6 s (plus 12 round trips each: 0.5 on a quiet
    # machine); evaluators played one after the other read ~1.
    assert together < 0.75 * apart, (together, apart)
    for e in evaluators:
        e.close()


def test_together_keeps_each_suites_metrics_apart():
    plain = Evaluator(suite_gym.GymEnvironment(gym.vector.SyncVectorEnv(
        [lambda: _Counted(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)))
    train, held_out = evaluate_together([Evaluator([_group([3])]), plain],
                                        _FirstObservation())
    assert train["success_rate"] == 1.0
    assert "success_rate" not in held_out


def test_together_refuses_a_mix_of_deterministic_and_sampling():
    with pytest.raises(ValueError, match="deterministic"):
        evaluate_together([Evaluator([_group([2])]),
                           Evaluator([_group([2])], deterministic=False)],
                          _FirstObservation())


@pytest.mark.timeout(120)
def test_a_stop_gives_up_a_step_that_a_stopped_worker_holds():
    """Before, an evaluation waited in a pipe for a stopped (SIGSTOP)
    worker forever, past the stop that abandons evaluations; now it is
    given up 5 s after the stop, named, and closing ends the worker."""
    import signal

    class Config(_Config):
        env_name, async_env, num_eval_episodes = "CartPole-v1", True, 2

    evaluator = make_evaluator(Config(), suite_gym.load)
    workers = [env._env.processes[0] for env in evaluator._envs]
    try:
        evaluator.evaluate(_FirstObservation())  # the steps' pace
        os.kill(workers[1].pid, signal.SIGSTOP)
        asked = time.time() + 1.0
        with pytest.raises(EvaluationStopped) as e:
            evaluator.evaluate(_FirstObservation(),
                               should_stop=lambda: time.time() > asked)
        assert time.time() - asked < 15
        assert str(e.value).startswith(
            "the environments' step (or reset) did not come within 5 s of "
            "the stop"), e
        assert ("evaluation environment 1's worker has sent nothing for "
                in str(e.value)), e
        assert f"(pid {workers[1].pid}) is stopped (SIGSTOP" in str(e.value)
    finally:
        start = time.time()
        evaluator.close()
    assert time.time() - start < 15
    assert not any(w.is_alive() for w in workers)
