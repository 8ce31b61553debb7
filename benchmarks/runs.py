"""Helpers for benchmark scripts: run the train CLI (curves, throughput),
or a function in two gloo ranks."""
import argparse
import multiprocessing as mp
import os
import queue as queue_module
import re
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

from alf.bin.curves import welch_pvalue
from alf.trainers.evaluator import read_eval_csv


def two_gloo_ranks(target: Callable, args: Any,
                   timeout: float = 3600) -> Any:
    """Runs ``target(rank, init_file, args, queue)`` in 2 spawned processes
    (they form a gloo group through ``init_file``); returns the one object
    that rank 0 puts on ``queue``."""
    from alf.utils.distributed import rendezvous_file
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with rendezvous_file() as init_file:
        procs = [ctx.Process(target=target, args=(r, init_file, args, queue))
                 for r in range(2)]
        for p in procs:
            p.start()
        try:
            deadline = time.time() + timeout
            while True:
                try:
                    result = queue.get(timeout=1.0)
                    break
                except queue_module.Empty:
                    # A rank that died (its traceback is above) would
                    # leave this waiting for the whole timeout.
                    dead = [r for r, p in enumerate(procs)
                            if p.exitcode not in (None, 0)]
                    if dead or time.time() > deadline:
                        raise SystemExit(
                            f"rank {dead[0]} failed (exit code "
                            f"{procs[dead[0]].exitcode})" if dead else
                            f"no result after {timeout:g} s") from None
            for p in procs:
                p.join(timeout=60)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
    return result


def positive_int(text: str) -> int:
    """An argparse ``type``: a count of at least 1, or argparse's one-line
    usage error naming the flag (0 seeds or repeats averaged nothing, a
    capacity of 0 failed deep inside)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def require_sb3() -> None:
    """Exits with one line, before anything runs, if Stable-Baselines3 (the
    ``bench`` extra) is missing: the alf side would run first for
    nothing."""
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        raise SystemExit("stable-baselines3 is not installed: pip install "
                         "-c constraints.txt -e '.[bench]'") from None


def parse_config_or_exit(prog: str, gin_files: Sequence[str],
                         params: Sequence[str] = ()) -> None:
    """`alf.trainers.parse_config`, or one line naming the bad gin file or
    binding and the exit (a benchmark is not the place for a traceback
    from deep inside gin)."""
    from alf.trainers.config_parser import parse_config
    from alf.utils.errors import AlfError, one_line
    try:
        parse_config(list(gin_files), list(params))
    except AlfError as e:
        raise SystemExit(f"{prog}: {one_line(e)}") from None


def _last_error_line(log_path: str) -> str:
    """The CLI's one-line error (``alf.bin.train: error: ...``) in a run's
    log, else its last line."""
    try:
        with open(log_path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("alf.bin.train:")]
    return (errors or lines or [""])[-1]


def environment_spaces(cfg) -> Tuple[Any, Any, Any]:
    """The observation space, action space and first (raw) observation of
    ``cfg``'s environment, built once in this process and closed."""
    from alf.environments import env_fn
    env_fn.set_environment_process()  # one engine, here, no worker
    env = cfg.env_load_fn(cfg.env_name, num_envs=1, seed=0,
                          asynchronous=False)
    try:
        obs = env.reset(seed=0).observation
        return env.observation_space, env.action_space, obs
    finally:
        env.close()


def train_command(root_dir: str, gin_files: Sequence[str],
                  params: Sequence[str] = (), num_processes: int = 1,
                  extra_args: Sequence[str] = ()) -> List[str]:
    """The ``alf.bin.train`` command line of one run: ``num_processes`` 1
    runs ``--distributed none``; more run ``--distributed multi-process``."""
    cmd = [sys.executable, "-m", "alf.bin.train", "--root_dir", root_dir]
    for f in gin_files:
        cmd += ["--gin_file", f]
    for p in params:
        cmd += ["--gin_param", p]
    if num_processes > 1:
        cmd += ["--distributed", "multi-process", "--num_processes",
                str(num_processes)]
    return cmd + list(extra_args)


def train_runs(gin_file: str, root: str, seeds: Sequence[int],
               params: Sequence[str] = (), parallel: int = 2,
               extra_args: Sequence[str] = ()) -> Dict[int, Dict[str, list]]:
    """Trains one run per seed with the CLI, ``parallel`` at a time.

    Returns:
        seed -> the run's eval.csv columns.
    """
    seeds = list(seeds)
    results = {}
    for start in range(0, len(seeds), parallel):
        procs = []
        for seed in seeds[start:start + parallel]:
            root_dir = os.path.join(root, f"seed{seed}")
            cmd = train_command(root_dir, [gin_file],
                                [f"TrainerConfig.seed={seed}", *params],
                                extra_args=extra_args)
            os.makedirs(root, exist_ok=True)
            log = open(root_dir + ".log", "w")
            procs.append((seed, root_dir, subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT)))
        for seed, root_dir, proc in procs:
            if proc.wait() != 0:
                for _, _, other in procs:  # not left training unattended
                    other.kill()
                    other.wait()
                raise SystemExit(
                    f"seed {seed} failed: {_last_error_line(root_dir + '.log')}"
                    f" (whole log: {root_dir}.log)")
            results[seed] = read_eval_csv(os.path.join(root_dir, "eval.csv"))
    return results


def first_reaching(curve: Dict[str, list], threshold: float):
    """Env steps of the first evaluation with return >= threshold, or None."""
    for steps, ret in zip(curve["env_steps"], curve["average_return"]):
        if ret >= threshold:
            return int(steps)
    return None


def print_curves(results: Dict[int, Dict[str, list]],
                 column: str = "average_return") -> List[float]:
    """Prints env steps against ``column`` for every seed, one row per
    evaluation, with the mean; returns the mean curve."""
    seeds = sorted(results)
    steps = results[seeds[0]]["env_steps"]
    print(f"{'env_steps':>10s} " + " ".join(f"{'seed' + str(s):>9s}"
                                            for s in seeds) + f" {'mean':>9s}")
    means = []
    for i, step in enumerate(steps):
        vals = [results[s][column][i] for s in seeds
                if i < len(results[s][column])]
        means.append(sum(vals) / len(vals))
        print(f"{int(step):10d} " + " ".join(f"{v:9.1f}" for v in vals) +
              f" {means[-1]:9.1f}")
    return means


_PROGRESS = re.compile(r"env steps (\d+)/(\d+) \| (\d+) steps/s")
# absl's prefix (hh:mm:ss.micro) and the env steps of a progress line.
_STAMPED = re.compile(r"^I\d{4} (\d\d):(\d\d):([\d.]+) .*"
                      r"\| env steps (\d+)/\d+ \|", re.MULTILINE)
_LEARNER = re.compile(r"learner ([\d.]+) ms CPU/step(?: \(wall ([\d.]+)\))?")
_ACTORS = re.compile(r"actors ([\d.]+) ms CPU/step \(env step ([\d.]+)"
                     r"(?:; busy wall ([\d.]+|nan))?\), "
                     r"waiting (\d+)% for a policy, slowest (?:segment )?([\d.]+)x the "
                     r"fastest (?:\| inference ([\d.]+) ms CPU/step \(batch "
                     r"([\d.]+)\) )?\| learner waiting (\d+)%")


_FINAL_EVAL = re.compile(r"^I\d{4} [\d:.]+ .*\] eval at \d+ env steps",
                         re.MULTILINE)


def steady_rate(output: str) -> float:
    """Env steps/s between the first and the last progress line of a train
    CLI's ``output`` before its final evaluation: the pipeline's fill (the
    first iteration, before the first line) and the final evaluation (with
    its calibration; the trainer's last progress line comes after it) left
    out. NaN with fewer than two lines."""
    evals = list(_FINAL_EVAL.finditer(output))
    end = evals[-1].start() if evals else len(output)
    found = [m.groups() for m in _STAMPED.finditer(output)
             if m.start() < end]
    if len(found) < 2:
        return float("nan")

    def seconds(h, m, s):
        return 3600 * int(h) + 60 * int(m) + float(s)
    (h0, m0, s0, n0), (h1, m1, s1, n1) = found[0], found[-1]
    elapsed = (seconds(h1, m1, s1) - seconds(h0, m0, s0)) % 86400
    return (int(n1) - int(n0)) / elapsed if elapsed > 0 else float("nan")


def throughput_params(num_env_steps: int) -> List[str]:
    """Bindings for a run that measures training throughput: evaluation only
    at the end, no summaries or checkpoints in between."""
    return [f"TrainerConfig.num_env_steps={num_env_steps}",
            "TrainerConfig.eval_interval=0",
            "TrainerConfig.summary_interval=1000000",
            "TrainerConfig.checkpoint_interval=1000000"]


def train_throughput(gin_files: Sequence[str], params: Sequence[str],
                     root_dir: str, num_processes: int = 1,
                     extra_args: Sequence[str] = ()) -> Dict[str, float]:
    """Trains once with the CLI and measures its throughput.

    ``num_processes`` 1 runs ``--distributed none``; more runs
    ``--distributed multi-process``. ``root_dir`` must not hold an earlier
    run (it would be resumed).

    Returns:
        ``rate``: env steps/s from the trainer's last progress line (training
        only: no evaluation, no start-up); ``wall``: seconds of the whole
        command; ``wall_rate``: env steps / ``wall`` (start-up, process
        spawn and the final evaluation included); ``steady_rate``: see
        `steady_rate` (needs a small ``log_interval_seconds``);
        ``env_steps``; ``learner_ms``: the learner's CPU ms per env step
        (of rank 0) and ``learner_wall_ms`` the wall time it took
        (NaN from an older trainer); ``actor_ms`` and ``env_ms``: with asynchronous
        collection, rank 0's actors' CPU ms per env step, all of it and the
        part in the environments' step, ``busy_ms`` their wall ms per step
        while not waiting for a version, ``inference_ms`` and
        ``inference_batch``: its inference workers' CPU ms per env step and
        mean batch (0 without them), ``actor_spread``: the slowest actor's
        busy time over the fastest's (`ActorReport`), ``actor_wait`` and
        ``learner_wait``: the fractions of their time that the actors
        waited for a policy and the learner for unrolls (NaN otherwise).

    Raises:
        RuntimeError: if the run fails or prints no progress line (its
            output is kept in ``root_dir + ".log"``).
    """
    cmd = train_command(root_dir, gin_files, params, num_processes,
                        extra_args)
    start = time.perf_counter()
    out = run_in_own_group(cmd)
    wall = time.perf_counter() - start
    found = _PROGRESS.findall(out.stdout)
    if out.returncode != 0 or not found:
        with open(root_dir + ".log", "w") as f:
            f.write(" ".join(cmd) + "\n" + out.stdout)
        # The last line says why (alf's errors are one line); root_dir
        # may be a temporary folder that is gone once the caller fails.
        last = out.stdout.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"training failed (exit {out.returncode}): "
                           f"{last[0]} (whole output: {root_dir}.log)")
    steps, _, rate = (int(x) for x in found[-1])
    learner = _LEARNER.findall(out.stdout)
    actors = _ACTORS.findall(out.stdout)
    nan = float("nan")
    # A figure an older trainer's line lacks is NaN; no inference workers
    # is 0.
    last = ([float(x) if x else (nan if i == 2 else 0.0)
             for i, x in enumerate(actors[-1])] if actors else [nan] * 8)
    return {"rate": float(rate), "wall": wall, "wall_rate": steps / wall,
            "steady_rate": steady_rate(out.stdout), "env_steps": steps,
            "learner_ms": float(learner[-1][0]) if learner else nan,
            "learner_wall_ms": (float(learner[-1][1]) if learner and
                                learner[-1][1] else nan),
            "actor_ms": last[0], "env_ms": last[1], "busy_ms": last[2],
            "actor_wait": last[3] / 100, "actor_spread": last[4],
            "inference_ms": last[5], "inference_batch": last[6],
            "learner_wait": last[7] / 100}


def run_in_own_group(cmd: Sequence[str]) -> subprocess.CompletedProcess:
    """Runs ``cmd`` in a process group of its own and returns its exit
    status and output (stdout and stderr together, in ``stdout``);
    if this process is interrupted (Ctrl-C, or SIGTERM from `timeout`:
    see `terminate_on_sigterm`), the whole group (the trainer, its ranks,
    actors and environment workers) is stopped before this returns, so no
    part of a run outlives the benchmark and loads the next one."""
    import signal
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        text, _ = proc.communicate()
    except BaseException:
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                pass
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, text)


def terminate_on_sigterm() -> None:
    """SIGTERM (e.g. from `timeout`) raises SystemExit in this process, so
    that its ``finally`` blocks and `run_in_own_group` clean up."""
    import signal

    def _exit(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, _exit)


def print_library_comparison(rows: Dict[str, list], what: str) -> None:
    """Prints mean env steps/s and return per library, then alf/sb3 speed
    ratios per seed. ``rows``: library -> [(steps/s, return)] by seed."""
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(f"\n{'library':8s} {'env steps/s':>12s} {'eval return':>12s}")
    for name, r in rows.items():
        print(f"{name:8s} {statistics.mean(x for x, _ in r):12.0f} "
              f"{statistics.mean(y for _, y in r):12.1f}")
    ratios = [a[0] / s[0] for a, s in zip(rows["alf"], rows["sb3"])]
    print(f"\nspeed ratio alf/sb3 per seed: "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; "
          f"mean {statistics.mean(ratios):.2f}x ({what})")
    returns = {name: [y for _, y in r] for name, r in rows.items()}
    for name, values in returns.items():
        print(f"{name} returns per seed: "
              + ", ".join(f"{v:.1f}" for v in values))
    if len(returns["alf"]) > 1:
        # Single evaluations of RL policies are noisy: say whether the
        # returns differ beyond that noise.
        p, why = welch_pvalue(returns["alf"], returns["sb3"])
        print("returns alf vs sb3: " + (
            f"Welch's t-test p = {p:.2f} ("
            f"{'differ' if p < 0.05 else 'no significant difference'} at "
            "0.05)" if p is not None else f"no test ({why})"))
