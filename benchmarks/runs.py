"""Helpers for benchmark scripts: run the train CLI, read its eval.csv."""
import os
import subprocess
import sys
from typing import Dict, List, Sequence

from alf.trainers.evaluator import read_eval_csv


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
            cmd = [sys.executable, "-m", "alf.bin.train", "--gin_file",
                   gin_file, "--root_dir", root_dir, "--gin_param",
                   f"TrainerConfig.seed={seed}", *extra_args]
            for p in params:
                cmd += ["--gin_param", p]
            os.makedirs(root, exist_ok=True)
            log = open(root_dir + ".log", "w")
            procs.append((seed, root_dir, subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT)))
        for seed, root_dir, proc in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"seed {seed} failed; see {root_dir}.log")
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
