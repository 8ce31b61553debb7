"""Soak: a 2-process run whose ranks are killed (SIGKILL) every few minutes
must finish its budget by restarting itself, beside an undisturbed run.

    python benchmarks/soak_restarts.py --steps 3000000 --kill_every 120

Both runs train ``ppo_cart_pole.gin`` with 2 processes at the same time (so
they share the machine alike); a random rank of the disturbed run is killed
every ``kill_every`` s (+-25%) until it ends. Prints the kill and restart
times, then checks the disturbed run: it exits 0 with the whole budget,
every checkpoint loads, ``eval.csv`` is monotone, and its final returns are
in line with the undisturbed run's.

``--steps`` must span several checkpoints (``ppo_cart_pole.gin``: every
25,600 steps) and ``--kill_every`` must exceed the ranks' start-up, or the
disturbed run never gets past its first checkpoint (SOAK FAILED); a run
that ends before its first kill tested nothing (SOAK FAILED too). A short
check of the whole path: ``--steps 160000 --kill_every 25 --max_restarts
10`` (a few minutes; at 80,000 steps and 50 s a fast machine finished
before the first kill).
"""
import argparse
import math
import glob
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch

_STEPS_PER_ITER = 8 * 32  # ppo_cart_pole.gin: num_envs x unroll_length
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from alf.trainers.evaluator import read_eval_csv  # noqa: E402
from alf.utils.process import rank_pids  # noqa: E402


def _start(root: str, steps: int, restarts: int):
    cmd = [sys.executable, "-m", "alf.bin.train", "--gin_file",
           "ppo_cart_pole.gin", "--root_dir", root, "--distributed",
           "multi-process", "--num_processes", "2", "--max_restarts",
           str(restarts), "--gin_param",
           f"TrainerConfig.num_env_steps={steps}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    lines = []

    def read():
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip()))

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def _check(root: str, steps: int):
    """(problems found, final returns: mean of the last 3 evaluations)."""
    # A run ends after the iteration that reaches ``steps``.
    steps = math.ceil(steps / _STEPS_PER_ITER) * _STEPS_PER_ITER
    problems = []
    for path in glob.glob(os.path.join(root, "ckpt", "ckpt-*.pt")):
        try:
            torch.load(path, weights_only=True)
        except Exception as e:  # noqa: BLE001 - reported
            problems.append(f"{path} does not load: {e}")
    path = os.path.join(root, "eval.csv")
    if not os.path.exists(path):
        # Killed more often than it could checkpoint: SOAK FAILED, said so.
        return problems + [f"{path} missing: the run never evaluated"], \
            float("nan")
    curve = read_eval_csv(path)
    env_steps = curve["env_steps"]
    if env_steps != sorted(set(env_steps)):
        problems.append("eval.csv is not monotone")
    if not env_steps or env_steps[-1] != steps:
        problems.append(f"eval.csv ends at {env_steps[-1:]}, not {steps}")
    returns = curve["average_return"][-3:]
    return problems, sum(returns) / max(len(returns), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3_000_000)
    ap.add_argument("--kill_every", type=float, default=120.0)
    ap.add_argument("--max_restarts", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = args.root or tempfile.mkdtemp(prefix="alf-soak-")
    disturbed, undisturbed = (os.path.join(root, n)
                              for n in ("disturbed", "undisturbed"))
    t0 = time.time()
    proc, lines = _start(disturbed, args.steps, args.max_restarts)
    calm, calm_lines = _start(undisturbed, args.steps, 0)
    kills, ended = [], {}

    def poll():
        for name, p in (("disturbed", proc), ("undisturbed", calm)):
            if p.poll() is not None and name not in ended:
                ended[name] = time.time() - t0
        return proc.poll()

    while poll() is None:
        deadline = time.time() + args.kill_every * rng.uniform(0.75, 1.25)
        while poll() is None and time.time() < deadline:
            time.sleep(0.5)
        ranks = rank_pids(proc.pid)
        if proc.poll() is None and ranks:
            rank = rng.randrange(len(ranks))
            os.kill(ranks[rank], signal.SIGKILL)
            kills.append((time.time() - t0, rank))
            print(f"{time.time() - t0:7.1f} s  killed rank {rank} "
                  f"(pid {ranks[rank]})", flush=True)
    code, calm_code = proc.wait(), calm.wait()
    poll()
    wall, calm_wall = ended["disturbed"], ended["undisturbed"]
    time.sleep(1)
    restarts = [t - t0 for t, ln in lines if "restarting every rank" in ln]
    resumes = [(t - t0, ln.split("] resumed from ")[1]) for t, ln in lines
               if "] resumed from " in ln]
    print("\nkill (s) | killed | restart (s) | training again (s) | resumed "
          "from (or '-': no checkpoint yet, a fresh start)")
    for i, (t, rank) in enumerate(kills):
        rs = restarts[i] if i < len(restarts) else float("nan")
        nxt = ([t_k for t_k, _ in kills[i + 1:]] + [float("inf")])[0]
        rf = next(((t_r, r) for t_r, r in resumes if t < t_r < nxt),
                  (float("nan"), "-"))
        print(f"{t:8.1f} | rank {rank} | {rs:11.1f} | {rf[0]:18.1f} | "
              f"{rf[1]}")
    problems, final = _check(disturbed, args.steps)
    calm_problems, calm_final = _check(undisturbed, args.steps)
    print(f"\ndisturbed:   exit {code}, {wall / 60:.1f} min, {len(kills)} "
          f"kills, {len(restarts)} restarts, final return (last 3 evals) "
          f"{final:.1f}; problems: {problems or 'none'}")
    print(f"undisturbed: exit {calm_code}, {calm_wall / 60:.1f} min, final "
          f"return {calm_final:.1f}; problems: {calm_problems or 'none'}")
    print(f"runs in {root}")
    if not kills:
        # Nothing was tested: the run ended before the first kill was due.
        print("SOAK FAILED: no rank was killed (the run ended first); "
              "raise --steps or lower --kill_every")
        return 1
    ok = (code == 0 and not problems and len(restarts) == len(kills)
          and final >= 0.9 * calm_final)
    print("SOAK PASSED" if ok else "SOAK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
