"""The training CLI with asynchronous collection (actor processes): Ctrl-C
(then resume), a killed actor (and, lock-step, a killed or stopped
environment worker) and 2-process training end cleanly, leaving no
process."""
import glob
import os
import signal
import time

import pytest
import torch

from alf.utils.process import children, rank_pids
from cli_harness import Run, assert_no_process_left
from test_train import _cmd, _env

pytestmark = pytest.mark.timeout(180)

ASYNC = {"TrainerConfig.unroll_mode": '"async"',
         "TrainerConfig.log_interval_seconds": "0.1",
         "TrainerConfig.eval_interval": "0"}


class _Run(Run):
    def __init__(self, cmd):
        super().__init__(cmd, env=_env())


def test_async_ctrl_c_saves_a_checkpoint_and_leaves_no_process(tmp_path):
    # The evaluator process too (asynchronous evaluation, one in flight).
    run = _Run(_cmd(tmp_path / "run", **dict(ASYNC, **{
        "TrainerConfig.num_env_steps": "10000000",
        "TrainerConfig.async_eval": "True",
        "TrainerConfig.eval_interval": "1"})))
    try:
        assert run.started.wait(90), run.out
        time.sleep(0.3)
        run.proc.send_signal(signal.SIGINT)
    finally:
        rc = run.finish()
    assert rc == 130, run.out
    assert "Traceback" not in run.out, run.out
    ckpts = glob.glob(str(tmp_path / "run" / "ckpt" / "ckpt-*.pt"))
    assert ckpts, run.out
    assert_no_process_left(run.proc.pid)

    # The same command, with a budget 2 iterations further, resumes from
    # that checkpoint (its counters and policy version) and finishes.
    saved = torch.load(max(ckpts), weights_only=True)["counters"]
    target = saved["env_steps"] + 64  # 2 iterations of 2 envs x 16 steps
    resumed = _Run(_cmd(tmp_path / "run", **ASYNC,
                        **{"TrainerConfig.num_env_steps": str(target)}))
    rc = resumed.finish()
    assert rc == 0, resumed.out
    assert "resumed from" in resumed.out, resumed.out
    final = glob.glob(str(tmp_path / "run" / "ckpt" / "ckpt-*.pt"))
    counters = torch.load(max(final, key=os.path.getmtime),
                          weights_only=True)["counters"]
    assert counters["env_steps"] == target, counters
    assert counters["iteration"] == saved["iteration"] + 2, counters
    assert_no_process_left(resumed.proc.pid)


def _actors(pid):
    """The spawned processes under ``pid`` (actors; for 2 processes, the
    ranks too)."""
    return [c for c in children(pid)
            if b"spawn_main" in open(f"/proc/{c}/cmdline", "rb").read()]


def _assert_saved_the_last_iteration(run, root, spi, who="actor"):
    """One error line naming the killed process (``who``) and the
    checkpoint saved, which holds a complete iteration (no regular
    checkpoint is due)."""
    said = [ln for ln in run.lines if "alf.bin.train: error:" in ln]
    assert len(said) == 1, run.out
    assert who in said[0] and "SIGKILL" in said[0], said[0]
    assert "Traceback" not in run.out, run.out
    ckpts = glob.glob(str(root / "ckpt" / "ckpt-*.pt"))
    assert len(ckpts) == 1, run.out
    counters = torch.load(ckpts[0], weights_only=True)["counters"]
    assert counters["iteration"] > 0, counters
    assert counters["env_steps"] == counters["iteration"] * spi, counters
    assert (f"the checkpoint at {counters['env_steps']} env steps"
            in said[0]), said[0]
    assert_no_process_left(run.proc.pid)


def test_a_killed_actor_ends_the_run_in_one_line_and_saves_the_iteration(
        tmp_path):
    """An actor's death costs only the iteration it happened in: the run
    saves the last complete one (a restart resumes from it), no regular
    checkpoint being due."""
    run = _Run(_cmd(tmp_path / "run", **ASYNC,
                    **{"TrainerConfig.num_env_steps": "10000000",
                       "TrainerConfig.checkpoint_interval": "1000000"}))
    try:
        assert run.started.wait(90), run.out
        actors = _actors(run.proc.pid)
        assert len(actors) >= 2, actors
        os.kill(actors[1], signal.SIGKILL)
    finally:
        rc = run.finish()
    assert rc == 1, run.out
    _assert_saved_the_last_iteration(run, tmp_path / "run", 32)


def _two_ranks(root, params):
    """A 2-process run of ``params`` that trains until stopped, with no
    regular checkpoint due."""
    return _cmd(root, **dict(params, **{
        "TrainerConfig.num_env_steps": "10000000",
        "TrainerConfig.checkpoint_interval": "1000000"})) + [
            "--distributed", "multi-process", "--num_processes", "2"]


def test_an_actor_killed_in_rank_1_ends_both_ranks_after_rank_0_saves(
        tmp_path):
    """Rank 0 writes the checkpoint, so it must learn that rank 1's actor
    died: the ranks agree on it after each unroll."""
    root = tmp_path / "run"
    run = _Run(_two_ranks(root, ASYNC))
    try:
        assert run.started.wait(120), run.out
        ranks = rank_pids(run.proc.pid)
        actors = _actors(ranks[1])
        assert actors, (ranks, actors)
        os.kill(actors[0], signal.SIGKILL)
    finally:
        rc = run.finish(timeout=150)
    assert rc == 1, run.out
    _assert_saved_the_last_iteration(run, root, 32)
    assert "of rank 1" in run.out, run.out


def _stop_a_helper(run, find, then_sigterm):
    """Stops (SIGSTOP) the helper process ``find(launcher pid)`` once
    ``run`` trains (and, ``then_sigterm``, the run a second later); waits
    for the run's end. Returns (the helper's pid, the run's exit code, the
    seconds it took to end)."""
    try:
        assert run.started.wait(120), run.out
        pid = find(run.proc.pid)
        os.kill(pid, signal.SIGSTOP)
        if then_sigterm:
            time.sleep(1.0)
            run.proc.send_signal(signal.SIGTERM)
        start = time.time()
        rc = run.finish(timeout=60 if then_sigterm else 90)
        took = time.time() - start
    finally:
        run.finish()
    return pid, rc, took


def _a_stop_ends_the_wait_for_a_stopped_helper(run, root, find, said):
    """Stops (SIGSTOP) the helper process ``find(launcher pid)`` once
    ``run`` trains, then stops the run (SIGTERM); asserts that it exits as
    stopped, promptly, having saved once, the log holding each of
    ``said``."""
    _, rc, took = _stop_a_helper(run, find, then_sigterm=True)
    assert rc == 143, run.out
    assert took < 45, took
    assert "stopped at" in run.out and "Traceback" not in run.out, run.out
    for part in said:
        assert part in run.out, (part, run.out)
    assert len(glob.glob(str(root / "ckpt" / "ckpt-*.pt"))) == 1, run.out
    assert_no_process_left(run.proc.pid)


def test_a_stop_ends_a_wait_for_a_stopped_actor_of_rank_1(tmp_path):
    """A hung actor (SIGSTOP) held the run past a scheduler's SIGTERM
    until its grace ran out, without a checkpoint: now both ranks save
    the last complete iteration and exit as stopped."""
    root = tmp_path / "run"
    _a_stop_ends_the_wait_for_a_stopped_helper(
        _Run(_two_ranks(root, ASYNC)), root,
        lambda launcher: _actors(rank_pids(launcher)[1])[0],
        ["actor 0 (environment 0 of rank 1) has sent nothing"])


def test_a_killed_environment_worker_of_rank_1_saves_the_iteration_too(
        tmp_path):
    """Lock-step collection, environments in subprocesses: a worker's
    death is agreed and saved for as an actor's is."""
    root = tmp_path / "run"
    run = _Run(_two_ranks(root, {
        "TrainerConfig.async_env": "True",
        "TrainerConfig.log_interval_seconds": "0.1",
        "TrainerConfig.eval_interval": "0"}))
    try:
        assert run.started.wait(120), run.out
        workers = _actors(rank_pids(run.proc.pid)[1])
        assert workers, run.out
        os.kill(workers[0], signal.SIGKILL)
    finally:
        rc = run.finish(timeout=150)
    assert rc == 1, run.out
    _assert_saved_the_last_iteration(
        run, root, 32, who="rank 1's training environment worker 0 of 1")


LOCK_STEP_WORKERS = {"TrainerConfig.async_env": "True",
                     "TrainerConfig.log_interval_seconds": "0.1",
                     "TrainerConfig.eval_interval": "0"}


def test_a_stop_ends_a_lock_step_wait_for_a_stopped_environment_worker(
        tmp_path):
    """Lock-step collection waited in a pipe for a stopped (SIGSTOP)
    environment worker past a scheduler's SIGTERM, until a second signal,
    without a checkpoint: now it saves the last complete iteration."""
    root = tmp_path / "run"
    # The training environments' workers start first (the evaluation
    # environments' next).
    _a_stop_ends_the_wait_for_a_stopped_helper(
        _Run(_cmd(root, **dict(LOCK_STEP_WORKERS, **{
            "TrainerConfig.num_env_steps": "10000000",
            "TrainerConfig.checkpoint_interval": "1000000"}))), root,
        lambda launcher: sorted(_actors(launcher))[0],
        ["the environments' step (or reset) did not come within 5 s of "
         "the stop", "training environment worker 0 of 2 has sent nothing "
         "for"])


def _stopped_helper_fails_the_run(run, root, find, said_parts):
    """Stops (SIGSTOP) the helper process ``find(launcher pid)`` once
    ``run`` (2 ranks, collectives timing out after 60 s) trains; asserts
    that the run then fails before its collectives time out, every rank
    having saved, in one line holding each of ``said_parts`` (formatted
    with the helper's ``pid``)."""
    pid, rc, took = _stop_a_helper(run, find, then_sigterm=False)
    assert rc == 1, run.out
    assert took < 45, took  # not the collectives' 60 s
    said = [ln for ln in run.lines if "alf.bin.train: error:" in ln]
    assert len(said) == 1, run.out
    for part in said_parts:
        assert part.format(pid=pid) in said[0], (part, said[0])
    assert glob.glob(str(root / "ckpt" / "ckpt-*.pt")), run.out
    assert_no_process_left(run.proc.pid)


def _only(pids):
    assert len(pids) == 1, pids
    return pids[0]


def test_a_stopped_actor_of_rank_1_fails_its_unroll_before_the_timeout(
        tmp_path):
    """Without a stop, the other ranks would wait for rank 1 in their
    next collective until it timed out ('rank 1 stopped answering',
    nothing saved): rank 1 gives up an unroll that a stopped actor holds
    back, and they save."""
    root = tmp_path / "run"
    _stopped_helper_fails_the_run(
        _Run(_two_ranks(root, dict(ASYNC, **{
            "collective_timeout.seconds": "60"}))), root,
        lambda launcher: _actors(rank_pids(launcher)[1])[0], [
            "actor 0 (environment 0 of rank 1) has sent nothing",
            "is stopped (SIGSTOP or a job control stop: SIGCONT resumes "
            "it): rank 1's unroll cannot come, and the other ranks would "
            "wait for it until their collectives time out",
            "is saved, and a restart resumes from it"])


def test_a_stopped_environment_worker_of_rank_1_fails_its_unroll(tmp_path):
    """Lock-step, 2 ranks: rank 0 waited for rank 1 in a collective until
    it timed out, nothing saved; now rank 1 gives up the step that a
    stopped worker holds back, and both save."""
    root = tmp_path / "run"
    _stopped_helper_fails_the_run(
        _Run(_two_ranks(root, dict(LOCK_STEP_WORKERS, **{
            "collective_timeout.seconds": "60"}))), root,
        lambda launcher: _only(_actors(rank_pids(launcher)[1])), [
            "rank 1's training environment worker 0 of 1 has sent nothing",
            ": rank 1's unroll cannot come",
            "is saved, and a restart resumes from it"])


def test_a_stopped_evaluation_worker_of_rank_0_fails_the_evaluation(
        tmp_path):
    """Rank 0's evaluation waited in a pipe for a stopped worker while the
    other ranks waited in a collective until it timed out, nothing saved:
    now rank 0 gives the evaluation up, and every rank saves."""
    root = tmp_path / "run"
    # Rank 0's training environment's worker, then the first evaluation
    # environment's (the main thread's children; the other evaluation
    # environments load on threads of their own).
    _stopped_helper_fails_the_run(
        _Run(_two_ranks(root, dict(LOCK_STEP_WORKERS, **{
            "TrainerConfig.eval_interval": "1",
            "collective_timeout.seconds": "60"}))), root,
        lambda launcher: sorted(_actors(rank_pids(launcher)[0]))[1], [
            "evaluation environment 0's worker has sent nothing",
            ": rank 0's evaluation cannot finish",
            "is saved, and a restart resumes from it"])


def test_a_stopped_evaluator_of_rank_0_fails_the_last_evaluation(
        tmp_path):
    """The other ranks waited in a collective for rank 0, which waited for
    a stopped asynchronous evaluator's last evaluation, until the
    collective timed out, nothing saved: now every rank saves."""
    root = tmp_path / "run"
    _stopped_helper_fails_the_run(
        _Run(_cmd(root, **{
            "TrainerConfig.num_env_steps": "16000",
            # "started" (a progress line) long before the last evaluation
            "TrainerConfig.log_interval_seconds": "0.1",
            "TrainerConfig.async_eval": "True",
            "TrainerConfig.eval_interval": "5",
            "TrainerConfig.checkpoint_interval": "1000000",
            "collective_timeout.seconds": "60"}) + [
                "--distributed", "multi-process", "--num_processes", "2"]),
        root, lambda launcher: _only(_actors(rank_pids(launcher)[0])), [
            "the evaluator process (pid {pid}) is stopped (SIGSTOP",
            ": rank 0's evaluation cannot finish",
            "the final checkpoint, at 16000 env steps, is saved, and a "
            "restart evaluates it"])


def test_async_two_processes_train_and_finish(tmp_path):
    root = tmp_path / "run"
    run = _Run(_cmd(root, **dict(ASYNC, **{
        "TrainerConfig.async_eval": "True",
        "TrainerConfig.eval_interval": "4"})) + [
            "--distributed", "multi-process", "--num_processes", "2"])
    rc = run.finish(timeout=150)
    assert rc == 0, run.out
    counters = torch.load(max(glob.glob(str(root / "ckpt" / "ckpt-*.pt"))),
                          weights_only=True)["counters"]
    assert counters["env_steps"] == 512, counters
    # Rank 0's evaluator played the last evaluation before the run ended.
    with open(root / "eval.csv") as f:
        assert f.read().splitlines()[-1].startswith("512,"), run.out
    assert_no_process_left(run.proc.pid)
