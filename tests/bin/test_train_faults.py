"""What clusters do to a distributed run, each on a real process tree:
preemption signals, a killed rank (with and without restarts, built-in
launcher and torchrun), a stalled rank, a killed launcher."""
import glob
import os
import re
import signal
import sys
import time

import pytest
import torch

from alf.trainers.evaluator import read_eval_csv
from alf.utils.process import children, rank_pids
from cli_harness import Run, assert_no_process_left
from test_train_distributed import MP, REPO, TINY, _cmd

ENDLESS = 10_000_000  # env steps: the run ends on a signal or a failure
# collective_timeout.seconds of the stall tests: past a loaded start-up.
STALL_S = 12
# 64 env steps per iteration; a checkpoint every 1280.
LONG = TINY + ["TrainerConfig.log_interval_seconds=0.2",
               "TrainerConfig.eval_interval=20",
               "TrainerConfig.checkpoint_interval=20",
               "TrainerConfig.sync_check_interval=50"]


def _env(tmp_path):
    """The CLI's environment, with a private TMPDIR (to see what rendezvous
    folders are left)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def _assert_nothing_left(run, tmp_path, seconds=15):
    """No process of the run's session and no rendezvous folder remain."""
    assert_no_process_left(run.proc.pid, seconds)
    assert not glob.glob(str(tmp_path / "tmp" / "alf-rendezvous-*"))


def _start(tmp_path, steps, extra=MP, params=(), cmd=None):
    root = tmp_path / "run"
    cmd = cmd or _cmd(root, LONG + [f"TrainerConfig.num_env_steps={steps}",
                                    *params], extra=extra)
    run = Run(cmd, env=_env(tmp_path), marker="steps/s", cwd=REPO)
    run.wait_started()
    return run, root


def _wait_for_checkpoint(root, timeout=60):
    deadline = time.time() + timeout
    while not glob.glob(str(root / "ckpt" / "ckpt-*.pt")):
        assert time.time() < deadline, "no checkpoint was written"
        time.sleep(0.1)


def _assert_finished(root, steps):
    curve = read_eval_csv(str(root / "eval.csv"))["env_steps"]
    assert curve == sorted(set(curve)), curve  # monotone, no repeats
    assert curve[-1] == steps
    for path in glob.glob(str(root / "ckpt" / "ckpt-*.pt")):
        torch.load(path, weights_only=True)  # every checkpoint loads
    assert os.path.exists(root / "ckpt" / f"ckpt-{steps}.pt")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_preemption_signal_checkpoints_and_exits_conventionally(tmp_path,
                                                                sig):
    run, root = _start(tmp_path, ENDLESS)
    start = time.time()
    run.proc.send_signal(sig)  # to the launcher alone, as Kubernetes does
    code = run.finish(timeout=30)
    assert code == 128 + sig, run.out[-3000:]
    assert time.time() - start < 10
    name = signal.Signals(sig).name
    assert run.out.count(f"{name}: stopped at") == 1, run.out[-3000:]
    assert run.out.count("stopping after this iteration") == 1
    assert "Traceback" not in run.out
    _assert_nothing_left(run, tmp_path)
    ckpts = glob.glob(str(root / "ckpt" / "ckpt-*.pt"))
    assert ckpts
    if sig != signal.SIGTERM:
        return  # the checkpoint is the same whichever signal asked for it
    resumed = Run(_cmd(root, LONG + ["TrainerConfig.num_env_steps=2560"]),
                  env=_env(tmp_path), cwd=REPO)
    assert resumed.finish(timeout=120) == 0, resumed.out[-3000:]
    assert "resumed from" in resumed.out


@pytest.mark.timeout(200)
@pytest.mark.parametrize("grace,signals,why", [
    (0.5, 1, "0.5 s (--stop_grace)"), (60.0, 2, "a second SIGINT")])
def test_a_stop_that_cannot_finish_its_iteration_says_so(tmp_path, grace,
                                                         signals, why):
    """Iterations of ~5 s (a slow simulator): past --stop_grace, or on a
    second Ctrl-C, the ranks are aborted, and the launcher says that this
    stop saved no checkpoint."""
    run, _ = _start(tmp_path, ENDLESS, extra=MP + [
        "--stop_grace", str(grace)], params=[
            "TrainerConfig.env_load_fn=@straggler_load",
            "straggler_load.ranks=(0, 1)", "straggler_load.delay=0.3"])
    # The first progress line comes just before rank 0 looks for a stop at
    # the iteration's end: a signal sent at once can be seen there, and
    # the stop then finishes with a checkpoint. A second into the next
    # iteration it cannot.
    time.sleep(1.0)
    start = time.time()
    for _ in range(signals):
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
    assert run.finish(timeout=30) == 130, run.out[-3000:]
    assert time.time() - start < 12
    said = [ln for ln in run.lines if "aborted. Unless rank 0 said above "
            "that it saved the stop's checkpoint" in ln]
    assert len(said) == 1, run.out[-3000:]
    assert f"after {why}" in said[0] and "rank(s) 0, 1" in said[0], said[0]
    assert "stopped at" not in run.out and "Traceback" not in run.out
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stop_or_kill_during_the_final_evaluation_loses_nothing(tmp_path,
                                                                  sig):
    """The final checkpoint is written before the final evaluation, which
    a stop abandons as it does the others: before, that evaluation (minutes
    on MetaDrive) outlasted a scheduler's grace, and the SIGKILL that
    followed lost the training since the last checkpoint. Run again, the
    finished run evaluates its final step and trains nothing."""
    gin_file = tmp_path / "slow.gin"
    gin_file.write_text("include 'ppo_cart_pole.gin'\n"
                        "import slow_evaluation\n"
                        "TrainerConfig.algorithm_ctor = @SlowEvaluationPPO\n")
    env = dict(_env(tmp_path), PYTHONPATH=os.path.dirname(__file__))
    marker = tmp_path / "evaluating"
    root = tmp_path / "run"
    cmd = _cmd(root, TINY + ["TrainerConfig.num_env_steps=256",
                             "TrainerConfig.eval_interval=0",
                             "TrainerConfig.checkpoint_interval=100"],
               gin_file=str(gin_file))
    run = Run(cmd, env=dict(env, ALF_TEST_SLOW_EVAL=str(marker)), cwd=REPO)
    deadline = time.time() + 120
    while not marker.exists():
        assert time.time() < deadline and run.proc.poll() is None, \
            run.out[-3000:]
        time.sleep(0.1)
    if sig == signal.SIGKILL:  # the whole job, as a scheduler's last word
        os.killpg(run.proc.pid, sig)
        assert run.finish(timeout=30) == -sig
    else:
        run.proc.send_signal(sig)
        assert run.finish(timeout=30) == 128 + sig, run.out[-3000:]
        assert run.out.count("the final evaluation at 256 env steps was "
                             "stopped") == 1, run.out[-3000:]
        _assert_nothing_left(run, tmp_path)
    assert os.path.exists(root / "ckpt" / "ckpt-256.pt")
    assert not os.path.exists(root / "eval.csv")
    config = (root / "config.gin").read_text()
    # Evaluated with other bindings, as a resume records them.
    again = Run(cmd + ["--gin_param", "TrainerConfig.num_eval_episodes=3"],
                env=env, cwd=REPO)
    assert again.finish(timeout=120) == 0, again.out[-3000:]
    assert "without its final evaluation (stopped or killed); evaluating " \
        "it" in again.out, again.out[-3000:]
    assert "training on" not in again.out, again.out[-3000:]
    _assert_finished(root, 256)
    assert read_eval_csv(str(root / "eval.csv"))["env_steps"] == [256]
    assert (root / "config.gin").read_text() == config
    assert "TrainerConfig.num_eval_episodes = 3\n" in (
        root / "config-resumed-256.gin").read_text()


@pytest.mark.timeout(200)
def test_sigterm_to_the_whole_process_group_stops_cleanly(tmp_path):
    """A scheduler signals every process of the job: the environment
    workers must not die before the ranks have checkpointed."""
    run, root = _start(tmp_path, ENDLESS,
                       params=["TrainerConfig.async_env=True"])
    os.killpg(run.proc.pid, signal.SIGTERM)
    assert run.finish(timeout=30) == 143, run.out[-3000:]
    assert "SIGTERM: stopped at" in run.out and "Traceback" not in run.out
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(200)
def test_sigusr1_checkpoints_and_training_goes_on(tmp_path):
    run, root = _start(tmp_path, ENDLESS,
                       params=["TrainerConfig.checkpoint_interval=100000"])
    run.proc.send_signal(signal.SIGUSR1)
    deadline = time.time() + 30
    while "training goes on" not in run.out and time.time() < deadline:
        time.sleep(0.1)
    assert "SIGUSR1: checkpoint" in run.out, run.out[-3000:]
    assert glob.glob(str(root / "ckpt" / "ckpt-*.pt"))
    assert run.proc.poll() is None  # still training
    run.proc.send_signal(signal.SIGINT)
    assert run.finish(timeout=30) == 130
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(200)
def test_a_killed_rank_is_named_with_its_signal(tmp_path):
    run, root = _start(tmp_path, ENDLESS)
    os.kill(rank_pids(run.proc.pid)[1], signal.SIGKILL)
    assert run.finish(timeout=60) == 1
    err = run.out.strip().splitlines()
    assert any("rank 1 was killed by SIGKILL (exit -9" in ln for ln in err), \
        run.out[-3000:]
    assert "Connection reset" not in run.out and "Traceback" not in run.out
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(200)
def test_a_stalled_rank_is_named_after_the_collective_timeout(tmp_path):
    # The timeout covers the start-up too, where rank 0 alone builds its
    # evaluator and imports tensorboard between two collectives: 5 s was
    # within reach of a loaded 2-core machine's start-up.
    run, root = _start(tmp_path, ENDLESS,
                       params=[f"collective_timeout.seconds={STALL_S}"])
    start = time.time()
    os.kill(rank_pids(run.proc.pid)[1], signal.SIGSTOP)
    assert run.finish(timeout=90) == 1, run.out[-3000:]
    assert time.time() - start < 60 + STALL_S
    assert "rank 1 stopped answering" in run.out, run.out[-3000:]
    assert "SIGSTOP" in run.out and f"after {STALL_S} s" in run.out
    assert "Traceback" not in run.out
    _assert_nothing_left(run, tmp_path)
    with open(root / "config.gin") as f:  # the setting took effect
        assert f"collective_timeout.seconds = {STALL_S}" in f.read()


@pytest.mark.timeout(240)
def test_killed_rank_restarts_and_resumes_built_in_launcher(tmp_path):
    steps = 5_120
    run, root = _start(tmp_path, steps, extra=MP + ["--max_restarts", "1"])
    _wait_for_checkpoint(root)
    os.kill(rank_pids(run.proc.pid)[1], signal.SIGKILL)
    assert run.finish(timeout=180) == 0, run.out[-3000:]
    assert "rank 1 was killed by SIGKILL" in run.out
    assert "restart 1 of 1" in run.out
    assert "resumed from" in run.out
    _assert_finished(root, steps)
    _assert_nothing_left(run, tmp_path)


def _spawned(pid):
    """The spawned (multiprocessing) children of ``pid``."""
    return [c for c in children(pid)
            if b"spawn_main" in open(f"/proc/{c}/cmdline", "rb").read()]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("extra, params", [
    ([], ['TrainerConfig.unroll_mode="async"']),  # actors starting
    (MP, []),  # ranks starting
])
def test_ctrl_c_while_helpers_start_is_one_line(tmp_path, extra, params):
    """Before: KeyboardInterrupt tracebacks from spawned processes still
    importing, and now and then a rank left in gloo's rendezvous by a peer
    that had died so, until the stop grace (120 s) ran out."""
    root = tmp_path / "run"
    run = Run(_cmd(root, LONG + [f"TrainerConfig.num_env_steps={ENDLESS}",
                                 *params], extra=extra),
              env=_env(tmp_path), cwd=REPO)
    deadline = time.time() + 60
    while not _spawned(run.proc.pid) and time.time() < deadline:
        time.sleep(0.02)
    assert _spawned(run.proc.pid), run.out
    start = time.time()
    os.killpg(run.proc.pid, signal.SIGINT)
    assert run.finish(timeout=60) == 130, run.out[-3000:]
    assert time.time() - start < 40
    assert "Traceback" not in run.out, run.out[-3000:]
    assert "SIGINT before training started; nothing new was saved" in \
        run.out, run.out[-3000:]
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(240)
def test_a_single_process_restarts_too(tmp_path):
    """Without --distributed the one process runs under the launcher, as
    --max_restarts' help says, and is started again after it is killed."""
    steps = 3_072
    run, root = _start(tmp_path, steps, extra=["--max_restarts", "1"])
    _wait_for_checkpoint(root)
    os.kill(rank_pids(run.proc.pid)[0], signal.SIGKILL)
    assert run.finish(timeout=180) == 0, run.out[-3000:]
    assert "restart 1 of 1" in run.out and "resumed from" in run.out
    _assert_finished(root, steps)
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(240)
def test_a_killed_environment_worker_is_one_line_then_a_restart(tmp_path):
    """A gymnasium worker killed (out of memory): before, a single process
    printed a traceback and then waited forever in closing the others."""
    steps = 3_072
    run, root = _start(tmp_path, steps, extra=["--max_restarts", "1"],
                       params=["TrainerConfig.async_env=True"])
    _wait_for_checkpoint(root)
    workers = _spawned(rank_pids(run.proc.pid)[0])
    assert workers, run.out
    os.kill(workers[0], signal.SIGKILL)
    assert run.finish(timeout=180) == 0, run.out[-3000:]
    assert re.search(r"error: training environment worker 0 of \d+ was "
                     "killed by SIGKILL", run.out), run.out[-3000:]
    assert "restart 1 of 1" in run.out and "Traceback" not in run.out, \
        run.out[-3000:]
    _assert_finished(root, steps)
    _assert_nothing_left(run, tmp_path)


@pytest.mark.timeout(240)
def test_a_killed_actor_restarts_every_rank_as_a_killed_rank_does(tmp_path):
    """Asynchronous collection: an actor the kernel killed (out of memory)
    is a failure to restart from, as a dead environment worker of lock-step
    collection is, and the error names its rank."""
    steps = 5_120
    run, root = _start(tmp_path, steps, extra=MP + ["--max_restarts", "1"],
                       params=['TrainerConfig.unroll_mode="async"'])
    _wait_for_checkpoint(root)
    actors = _spawned(rank_pids(run.proc.pid)[1])
    assert actors, run.out
    os.kill(actors[0], signal.SIGKILL)
    assert run.finish(timeout=180) == 0, run.out[-3000:]
    assert "(environment 0 of rank 1) was killed by SIGKILL" in run.out, \
        run.out[-3000:]
    assert "restart 1 of 1" in run.out
    _assert_finished(root, steps)
    _assert_nothing_left(run, tmp_path)


def _torchrun_cmd(root, steps, params=(), extra=()):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", "2", *extra, "--monitor-interval", "0.2",
           "-m", "alf.bin.train", "--gin_file", "ppo_cart_pole.gin",
           "--root_dir", str(root)]
    for p in LONG + [f"TrainerConfig.num_env_steps={steps}", *params]:
        cmd += ["--gin_param", p]
    return cmd


def _torchrun_workers(agent: int):
    """torchrun's workers: the agent's children running alf.bin.train."""
    pids = []
    for pid in children(agent):
        with open(f"/proc/{pid}/cmdline") as f:
            if "alf.bin.train" in f.read():
                pids.append(pid)
    return pids


@pytest.mark.timeout(240)
def test_killed_rank_restarts_and_resumes_under_torchrun(tmp_path):
    steps = 5_120
    root = tmp_path / "run"
    cmd = _torchrun_cmd(root, steps, extra=["--max-restarts", "1"])
    run, _ = _start(tmp_path, steps, cmd=cmd)
    _wait_for_checkpoint(root)
    os.kill(_torchrun_workers(run.proc.pid)[-1], signal.SIGKILL)
    assert run.finish(timeout=180) == 0, run.out[-3000:]
    assert "resumed from" in run.out
    _assert_finished(root, steps)
    assert_no_process_left(run.proc.pid)


@pytest.mark.timeout(240)
def test_an_agreed_failure_is_said_once_under_torchrun(tmp_path):
    """Every rank ends with the same error after a killed actor (they
    agreed on it and saved): rank 0 alone prints it, as for bad input."""
    root = tmp_path / "run"
    cmd = _torchrun_cmd(root, 10_000_000, params=[
        'TrainerConfig.unroll_mode="async"',
        "TrainerConfig.checkpoint_interval=1000000"])
    run, _ = _start(tmp_path, 10_000_000, cmd=cmd)
    actors = _spawned(_torchrun_workers(run.proc.pid)[-1])
    assert actors, run.out
    os.kill(actors[0], signal.SIGKILL)
    assert run.finish(timeout=180) != 0
    said = [ln for ln in run.lines if "alf.bin.train: error:" in ln]
    assert len(said) == 1, run.out[-3000:]
    assert "of rank 1) was killed by SIGKILL" in said[0], said
    assert "the checkpoint at" in said[0], said
    assert_no_process_left(run.proc.pid)


@pytest.mark.timeout(200)
def test_ranks_do_not_outlive_a_killed_torchrun_agent(tmp_path):
    """Before, the workers trained on unattended to the end of their
    budget, holding the run's lock; now they checkpoint and exit."""
    root = tmp_path / "run"
    run, _ = _start(tmp_path, 0, cmd=_torchrun_cmd(root, ENDLESS))
    _wait_for_checkpoint(root)
    os.kill(run.proc.pid, signal.SIGKILL)
    assert_no_process_left(run.proc.pid, seconds=60)
    for t in run._readers:
        t.join(5)
    assert "SIGTERM: stopped at" in run.out, run.out[-3000:]
    assert not (root / ".alf-run.lock").exists()


@pytest.mark.timeout(200)
def test_a_stalled_rank_is_named_under_torchrun(tmp_path):
    cmd = _torchrun_cmd(tmp_path / "run", ENDLESS,
                        [f"collective_timeout.seconds={STALL_S}"])
    run, _ = _start(tmp_path, 0, cmd=cmd)
    stalled = _torchrun_workers(run.proc.pid)[-1]
    os.kill(stalled, signal.SIGSTOP)
    said = "rank 0 lost its peers: rank 1 showed no sign of life"
    deadline = time.time() + 90
    while said not in run.out and time.time() < deadline:
        time.sleep(0.2)
    # Named; torchrun would give the stopped rank 30 s to heed its SIGTERM
    # before killing it: let it heed it (CI's time).
    os.kill(stalled, signal.SIGCONT)
    assert run.finish(timeout=120) != 0
    assert said in run.out, run.out[-3000:]
    assert_no_process_left(run.proc.pid)


@pytest.mark.timeout(200)
def test_a_killed_launcher_leaves_a_checkpoint_and_no_process(tmp_path):
    run, root = _start(tmp_path, ENDLESS,
                       params=["TrainerConfig.checkpoint_interval=100000"])
    os.kill(run.proc.pid, signal.SIGKILL)  # the ranks get SIGTERM
    run.finish(timeout=30)  # the launcher: at once; the ranks save first
    deadline = time.time() + 60
    while (not glob.glob(str(root / "ckpt" / "ckpt-*.pt"))
           and time.time() < deadline):
        time.sleep(0.2)
    assert glob.glob(str(root / "ckpt" / "ckpt-*.pt")), run.out[-3000:]
    _assert_nothing_left(run, tmp_path, seconds=20)  # ranks, env workers
