"""Evaluation in a background process (``TrainerConfig.async_eval``): it
records what synchronous evaluation records, keeps the evaluated weights
as best.pt, and fails or dies in one line without leaving a process."""
import multiprocessing as mp
import os
import signal

import pytest
import torch

from alf.trainers import Trainer
from alf.trainers.async_evaluator import AsyncEvaluator, EvaluationError
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.evaluator import read_eval_csv
from alf.utils.errors import AlfError, ConfigError
from test_trainer import SPI, clean_gin, tiny_config  # noqa: F401
from test_trainer import _short_episodes as short_episodes


def _config(**kw):
    args = dict(num_env_steps=12 * SPI, eval_interval=2,
                checkpoint_interval=1, max_checkpoints=None,
                held_out_env_load_fn=short_episodes,
                num_held_out_eval_episodes=3)  # rounds of 2 environments
    args.update(kw)
    return tiny_config(**args)


def refusing(env_name, **kw):
    raise ConfigError("refusing: a held-out load function that refuses")


class _Dying:
    """Environments whose reset kills their process (the evaluator's:
    ``asynchronous=False`` builds them in-process)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, seed=None):
        os.kill(os.getpid(), signal.SIGKILL)


def dying(env_name, **kw):
    from alf.environments import batched
    env = short_episodes(env_name, **kw)
    batched.BatchedEnvironment.register(_Dying)
    return _Dying(env)


def _rows(root, name="eval.csv"):
    return read_eval_csv(os.path.join(root, name))


@pytest.mark.timeout(180)
def test_asynchronous_evaluation_records_what_synchronous_records(tmp_path):
    """Synchronous collection in one process is reproducible, so each
    evaluation the asynchronous evaluator plays must equal the synchronous
    one at the same env step, and best.pt must be the weights trained to
    the step that scored best."""
    sync_root, async_root = str(tmp_path / "sync"), str(tmp_path / "async")
    os.makedirs(sync_root)
    os.makedirs(async_root)
    # Environments in subprocesses: the evaluator must be able to start
    # them (as MetaDrive's always are).
    want = Trainer(sync_root, config=_config(async_env=True)).train()
    got = Trainer(async_root, config=_config(async_eval=True,
                                             async_env=True)).train()
    assert got == want  # the last evaluation, waited for
    for name in ("eval.csv", "eval_held_out.csv"):
        sync_rows, async_rows = _rows(sync_root, name), _rows(async_root, name)
        # A due evaluation may be skipped while the evaluator is busy;
        # every one played is the synchronous one, and the last is there.
        assert async_rows["env_steps"][-1] == 12 * SPI
        assert len(async_rows["env_steps"]) >= 2
        for i, steps in enumerate(async_rows["env_steps"]):
            j = sync_rows["env_steps"].index(steps)
            for column, values in async_rows.items():
                assert values[i] == sync_rows[column][j], (name, column)
    best = Checkpointer(os.path.join(async_root, "ckpt")).best()
    rows = _rows(async_root)
    scored = dict(zip(rows["env_steps"], rows["average_return"]))
    assert best is not None and best["value"] == max(scored.values())
    assert scored[best["env_steps"]] == best["value"]
    kept = torch.load(best["path"], weights_only=True)
    trained = torch.load(os.path.join(
        sync_root, "ckpt", f"ckpt-{best['env_steps']}.pt"), weights_only=True)
    assert kept["counters"] == trained["counters"]
    for k, v in trained["algorithm"].items():
        assert torch.equal(kept["algorithm"][k], v), k
    # Negative control: the final weights differ from the best's (else the
    # comparison above could not tell a stale snapshot from a fresh one).
    if best["env_steps"] != 12 * SPI:
        final = torch.load(os.path.join(async_root, "ckpt",
                                        f"ckpt-{12 * SPI}.pt"),
                           weights_only=True)["algorithm"]
        assert any(not torch.equal(final[k], v)
                   for k, v in kept["algorithm"].items())
    assert not mp.active_children()


@pytest.mark.timeout(120)
def test_an_evaluator_that_fails_to_build_stops_the_run_in_one_line(
        tmp_path):
    with pytest.raises(AlfError, match="a held-out load function that "
                       "refuses"):
        Trainer(str(tmp_path), config=_config(
            async_eval=True, held_out_env_load_fn=refusing)).train()
    assert not mp.active_children()
    assert not os.path.exists(tmp_path / "eval.csv")


@pytest.mark.timeout(120)
def test_a_killed_evaluator_is_named_with_its_signal(tmp_path, caplog):
    with pytest.raises(EvaluationError,
                       match=r"killed by SIGKILL \(exit -9"):
        with caplog.at_level("WARNING"):
            Trainer(str(tmp_path), config=_config(
                async_eval=True, held_out_env_load_fn=dying)).train()
    assert not mp.active_children()
    # Its evaluation was not dropped for a stop (as the log said).
    assert "training stopped" not in caplog.text
    assert "not recorded: the evaluator ended first" in caplog.text


@pytest.mark.timeout(120)
def test_a_killed_evaluator_costs_no_iteration(tmp_path):
    """The evaluator's death is noticed after a complete iteration: that
    iteration is saved (no regular checkpoint is due), and the resumed
    run owes the evaluation."""
    from alf.trainers.checkpointer import Checkpointer
    with pytest.raises(EvaluationError) as info:
        Trainer(str(tmp_path), config=_config(
            async_eval=True, held_out_env_load_fn=dying,
            checkpoint_interval=100)).train()
    ckpts = os.listdir(tmp_path / "ckpt")
    assert len(ckpts) == 1 and ckpts[0].startswith("ckpt-"), ckpts
    state = Checkpointer.load(str(tmp_path / "ckpt" / ckpts[0]))
    steps = state["counters"]["env_steps"]
    assert steps == state["counters"]["iteration"] * SPI >= 2 * SPI
    assert str(info.value).startswith("the evaluator process was killed by "
                                      "SIGKILL"), info.value
    # Noticed at the run's last iteration on a loaded machine: then the
    # restart only evaluates, and the message says so.
    saved = (f"the final checkpoint, at {steps} env steps, is saved, and a "
             "restart evaluates it" if steps == 12 * SPI else
             f"the checkpoint at {steps} env steps (the last complete "
             "iteration) is saved, and a restart resumes from it")
    assert str(info.value).endswith(saved), info.value
    assert not mp.active_children()


class _Slow(_Dying):
    """Environments whose every step takes a second."""

    def reset(self, seed=None):
        return self._env.reset(seed=seed)

    def step(self, action):
        import time
        time.sleep(1.0)
        return self._env.step(action)


def slow(env_name, **kw):
    from alf.environments import batched
    env = short_episodes(env_name, **kw)
    batched.BatchedEnvironment.register(_Slow)
    return _Slow(env)


@pytest.mark.timeout(120)
def test_closing_during_an_evaluation_drops_it_at_once_and_says_so(
        caplog):
    """A stop while the evaluator plays (minutes on MetaDrive) does not
    wait for the evaluation: it is dropped, logged, the evaluator gone."""
    import gymnasium as gym
    import time

    from alf.algorithms.ppo_algorithm import PPOAlgorithm
    from alf.trainers.async_evaluator import AsyncEvaluator
    cfg = _config(async_eval=True, held_out_env_load_fn=slow)
    evaluator = AsyncEvaluator(cfg)
    try:
        evaluator.wait_ready()
        env = gym.make("CartPole-v1")
        alg = PPOAlgorithm(env.observation_space, env.action_space, cfg)
        evaluator.submit(64, alg.acting_state())
        assert evaluator.busy
    finally:
        start = time.perf_counter()
        with caplog.at_level("WARNING"):
            evaluator.close()
        took = time.perf_counter() - start
    assert took < 5, took  # not the 20 one-second steps, nor close's 10 s
    assert "evaluation at 64 env steps dropped" in caplog.text
    assert not mp.active_children()


@pytest.mark.timeout(120)
def test_a_stop_abandons_the_wait_for_the_last_evaluation(tmp_path,
                                                          monkeypatch):
    """Before, a stop during the final evaluation waited for the evaluator
    (minutes on MetaDrive; a launcher's grace then aborted every rank,
    unsaved). Now it is dropped and owed: run again, the finished run
    evaluates its final checkpoint."""
    import time

    from alf.trainers.async_evaluator import AsyncEvaluator
    from alf.utils.errors import TrainingInterrupted
    root = str(tmp_path)
    trainer = Trainer(root, config=_config(
        async_eval=True, held_out_env_load_fn=slow, eval_interval=0,
        num_env_steps=2 * SPI))
    wait = AsyncEvaluator.wait

    def stopping(self, should_stop=None, held=None):
        trainer.request_stop()
        return wait(self, should_stop, held)

    monkeypatch.setattr(AsyncEvaluator, "wait", stopping)
    start = time.perf_counter()
    with pytest.raises(TrainingInterrupted, match="the final evaluation at "
                       f"{2 * SPI} env steps was stopped"):
        trainer.train()
    assert time.perf_counter() - start < 30  # not the slow evaluation
    assert not os.path.exists(os.path.join(root, "eval.csv"))
    monkeypatch.undo()
    again = Trainer(root, config=_config(async_eval=True, eval_interval=0,
                                         num_env_steps=2 * SPI))
    assert again.train()["average_return"] > 0
    assert _rows(root)["env_steps"] == [2 * SPI]
    assert not mp.active_children()


def _unstarted(monkeypatch, start: float):
    """(its warnings, its clock [seconds], an `AsyncEvaluator` without a
    process): for the bookkeeping of skips and waits."""
    from alf.trainers import async_evaluator
    warned: list = []
    monkeypatch.setattr(async_evaluator.logging, "warning",
                        lambda fmt, *args: warned.append(fmt % args))
    now = [start]
    monkeypatch.setattr(async_evaluator.time, "monotonic", lambda: now[0])
    return warned, now, AsyncEvaluator.__new__(AsyncEvaluator)


def test_skipped_evaluations_are_said_once_a_minute_with_their_count(
        monkeypatch):
    """An eval_interval far shorter than an evaluation skips one every
    iteration: once a warning each (116 lines in 25 s of CartPole)."""
    warned, now, evaluator = _unstarted(monkeypatch, 100.0)
    evaluator._skipped, evaluator._skip_warned_at = [], None
    for steps in range(32, 32 * 50, 32):
        evaluator._skip(steps)
        now[0] += 1.0
    assert len(warned) == 1 and warned[0].startswith(
        "evaluation at 32 env steps skipped: the evaluator was still busy")
    for steps in (1600, 1632):
        now[0] += 15.0
        evaluator._skip(steps)
    assert len(warned) == 2, warned
    assert warned[1].startswith("49 evaluations, at 64 to 1600 env steps, "
                                "skipped"), warned[1]
    assert warned[1].endswith("this is said once a minute at most")
    # Skips after the last warning are said when the evaluator closes
    # (before, never).
    for steps in (1664, 1696):
        now[0] += 1.0
        evaluator._skip(steps)
    assert len(warned) == 2, warned

    class _Gone:
        pid = os.getpid()

        def is_alive(self):
            return False

        def join(self, timeout=None):
            pass

        def send_bytes(self, data):
            raise OSError("closed")

        def close(self):
            pass
    evaluator._running = evaluator._waiting = None
    evaluator._proc = evaluator._conn = _Gone()
    evaluator.close()
    assert len(warned) == 3 and warned[2].startswith(
        "3 evaluations, at 1632 to 1696 env steps, skipped"), warned


@pytest.mark.timeout(120)
def test_a_dead_worker_of_the_evaluators_environments_is_a_failure(
        tmp_path, monkeypatch):
    """Before, the evaluator reported it as the user's mistake (it is an
    AlfError): one line, nothing saved, no restart."""
    from alf.algorithms import PPOAlgorithm
    from alf.utils.process import children
    ref: list = []
    train_iter = PPOAlgorithm.train_iter

    def killing(self, progress):
        if ref[0].iteration == 1:
            evaluator = ref[0]._async_eval._proc.pid
            workers = [c for c in children(evaluator) if b"spawn_main" in
                       open(f"/proc/{c}/cmdline", "rb").read()]
            assert workers
            os.kill(workers[0], signal.SIGKILL)
        return train_iter(self, progress)
    monkeypatch.setattr(PPOAlgorithm, "train_iter", killing)
    trainer = Trainer(str(tmp_path), config=_config(
        async_eval=True, async_env=True, checkpoint_interval=100,
        held_out_env_load_fn=None))
    ref.append(trainer)
    with pytest.raises(EvaluationError) as info:
        trainer.train()
    said = str(info.value)
    assert said.startswith("the evaluator process: evaluation environment "
                           "0's worker was killed by SIGKILL"), said
    assert "the checkpoint at" in said, said
    assert os.listdir(tmp_path / "ckpt"), said


def test_a_long_wait_for_an_evaluation_says_what_the_evaluator_does(
        monkeypatch):
    """A stopped evaluator held the end of training silently."""
    warned, now, evaluator = _unstarted(monkeypatch, 0.0)
    evaluator._running, evaluator._waiting = (512, None, None), None

    class _Proc:
        pid = os.getpid()
    evaluator._proc = _Proc()

    def poll(timeout=0.0):
        now[0] += 50.0
        if now[0] >= 350:
            evaluator._running = None
        return []
    evaluator.poll = poll
    assert evaluator.wait() == []
    assert len(warned) == 2, warned
    assert warned[0] == (f"waiting 150 s for the evaluation at 512 env "
                         f"steps; the evaluator process (pid {os.getpid()}) "
                         "is running (a slow environment step, or a loop?)")


@pytest.mark.parametrize("call", ["poll", "wait"])
def test_evaluations_finished_before_a_failure_come_with_it(call):
    """Before, an evaluation that finished in the same poll (or wait) as
    the evaluator's failure on the next one was lost, never recorded."""
    from alf.trainers.actor import encode
    from alf.trainers.async_evaluator import finished_before
    evaluator = AsyncEvaluator.__new__(AsyncEvaluator)
    mine, theirs = mp.Pipe()

    class _Proc:
        pid = os.getpid()

        @staticmethod
        def is_alive():
            return True
    evaluator._conn, evaluator._proc, evaluator._ready = mine, _Proc(), True
    evaluator._running, evaluator._waiting = (64, None, "kept"), (
        128, None, None)
    theirs.send_bytes(encode(("result", 64, {"average_return": 9.0}, None,
                              None)))
    if call == "poll":
        theirs.send_bytes(encode(("error", "failure", "", "worker died",
                                  "")))
        with pytest.raises(EvaluationError, match="worker died") as e:
            evaluator.poll()
    else:
        def fail_later(timeout=0.0, poll=evaluator.poll):
            if evaluator._running[0] == 128:  # the 64's result came
                theirs.send_bytes(encode(("error", "failure", "",
                                          "worker died", "")))
            return poll(timeout)
        evaluator.poll = fail_later
        with pytest.raises(EvaluationError, match="worker died") as e:
            evaluator.wait()
    finished = finished_before(e.value)
    assert [(r.env_steps, r.metrics, r.snapshot) for r in finished] == [
        (64, {"average_return": 9.0}, "kept")], finished
    mine.close()
    theirs.close()


@pytest.mark.timeout(60)
def test_a_wait_that_other_ranks_share_gives_up_a_stopped_evaluator(
        monkeypatch):
    """Before, rank 0 waited for a stopped (SIGSTOP) evaluator's last
    evaluation while the other ranks waited in a collective until it timed
    out (blaming rank 0, nothing saved)."""
    import subprocess
    import sys
    import time
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(60)"])
    try:
        warned, now, evaluator = _unstarted(monkeypatch, 0.0)
        evaluator._running, evaluator._waiting = (512, None, None), None

        class _Proc:
            pid = child.pid
        evaluator._proc = _Proc()
        polls = []

        def poll(timeout=0.0):
            polls.append(now[0])
            if len(polls) == 3:
                os.kill(child.pid, signal.SIGSTOP)
                time.sleep(0.5)  # the stop takes effect once scheduled
            now[0] += 1.0
            return []
        evaluator.poll = poll
        with pytest.raises(EvaluationError) as e:
            evaluator.wait(held="rank 0's evaluation cannot finish")
        assert 8 <= len(polls) <= 10, polls  # stopped at 3, 5 s more
        assert str(e.value) == (
            f"the evaluator process (pid {child.pid}) is stopped (SIGSTOP or "
            "a job control stop: SIGCONT resumes it): rank 0's evaluation "
            "cannot finish, and the other ranks would wait for it until "
            "their collectives time out"), e.value
        assert EvaluationError.retryable
    finally:
        child.kill()
        child.wait()


@pytest.mark.timeout(120)
def test_the_trainer_records_what_finished_before_the_evaluator_failed(
        tmp_path, monkeypatch):
    from alf.trainers.async_evaluator import EvalResult, _finished_before
    poll = AsyncEvaluator.poll
    calls = []

    def failing_poll(self, timeout=0.0):
        if not self._ready:  # `wait_ready`'s, before any evaluation
            return poll(self, timeout)
        calls.append(1)
        if len(calls) < 2:
            return poll(self, timeout)
        error = EvaluationError("the evaluator process died")
        _finished_before(error, [EvalResult(
            7, {"average_return": 3.0, "average_episode_length": 3.0}, None,
            None, None)])
        raise error
    monkeypatch.setattr(AsyncEvaluator, "poll", failing_poll)
    with pytest.raises(EvaluationError, match="the evaluator process died"):
        Trainer(str(tmp_path), config=_config(
            async_eval=True, held_out_env_load_fn=None)).train()
    assert 7 in _rows(str(tmp_path))["env_steps"]
    assert not mp.active_children()
