"""Evaluation episodes and the ``eval.csv`` log."""
import csv
import os
import time
from typing import Dict, Optional

import torch

from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.environments.batched import BatchedEnvironment, check_environment
from alf.trainers import seeds

EVAL_CSV_COLUMNS = ("env_steps", "average_return", "average_episode_length")
#: Evaluations on the training environments' settings, and on held-out ones
#: (``TrainerConfig.held_out_env_load_fn``).
EVAL_CSV, HELD_OUT_CSV = "eval.csv", "eval_held_out.csv"


def make_evaluator(cfg, load_fn) -> "Evaluator":
    """An `Evaluator` of ``cfg.num_eval_episodes`` environments made by
    ``load_fn`` (the training environments' or the held-out ones'), for
    the `TrainerConfig` ``cfg``."""
    env = check_environment(load_fn(
        cfg.env_name, num_envs=cfg.num_eval_episodes, seed=None,
        asynchronous=cfg.async_env), load_fn)
    return Evaluator(env, seed=seeds.eval_seed(cfg.seed),
                     deterministic=cfg.eval_deterministic)


class Evaluator:
    """Runs ``num_episodes`` episodes, one per environment, with the policy's
    `predict_step` (deterministic) or its `rollout_step` (the sampling policy
    that collects training data).

    Evaluation never calls a collective, so in distributed training it runs
    on rank 0 alone.

    Args:
        env: a `BatchedEnvironment` with ``num_episodes`` sub-environments.
        seed: every evaluation resets the environments with this seed, so
            all evaluations of a run play the same episode starts (the same
            scenarios in MetaDrive) and differ only by the policy.
    """

    def __init__(self, env: BatchedEnvironment, seed: Optional[int] = None,
                 deterministic: bool = True):
        self._env = env
        self._seed = seed
        self._deterministic = deterministic

    @property
    def env(self) -> BatchedEnvironment:
        """The environments evaluation plays in."""
        return self._env

    def _act(self, algorithm, observation) -> torch.Tensor:
        if self._deterministic:
            return algorithm.predict_step(observation).output
        return algorithm.rollout_step(observation).output

    @torch.inference_mode()
    def evaluate(self, algorithm: RLAlgorithm) -> Dict[str, float]:
        """Plays one episode in each environment; returns the averages.

        A sampling policy draws from its own RNG stream (seeded by ``seed``),
        so evaluations are reproducible and leave training's RNG alone.
        """
        devices = [torch.cuda.current_device()] if torch.cuda.is_available(
        ) and torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            if self._seed is not None:
                torch.manual_seed(self._seed)
            return self._evaluate(algorithm)

    def _evaluate(self, algorithm: RLAlgorithm) -> Dict[str, float]:
        n = self._env.num_envs
        ts = self._env.reset(seed=self._seed)
        returns = torch.zeros(n)
        lengths = torch.zeros(n)
        metrics = {name: torch.full((n, ), float("nan"))
                   for name in self._env.episode_info}
        running = torch.ones(n, dtype=torch.bool)
        while running.any():
            obs = algorithm.observe(ts.observation, update=False)
            ts = self._env.step(self._act(algorithm, obs))
            returns += ts.reward * running
            lengths += running
            ending = running & ts.done
            for name, value in ts.episode_info.items():
                metrics[name][ending] = value[ending]
            running &= ~ts.done
        out = {"average_return": returns.mean().item(),
               "average_episode_length": lengths.mean().item()}
        for name, value in metrics.items():
            out[name] = value.nanmean().item()
        return out

    def close(self):
        """Closes the evaluation environments."""
        self._env.close()


def append_eval_csv(root_dir: str, env_steps: int,
                    metrics: Dict[str, float], name: str = EVAL_CSV) -> None:
    """Appends a row to ``ROOT_DIR/<name>`` (header written once).

    The first columns are always `EVAL_CSV_COLUMNS`; other metrics follow in
    the order of the first row written.
    """
    path = os.path.join(root_dir, name)
    row = dict(metrics, env_steps=env_steps)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    if new:
        fields = list(EVAL_CSV_COLUMNS) + sorted(set(row) -
                                                 set(EVAL_CSV_COLUMNS))
    else:
        with open(path, newline="") as f:
            fields = next(csv.reader(f))
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)
        f.flush()
        os.fsync(f.fileno())


def set_aside_later_rows(root_dir: str, env_steps: int,
                         name: str = EVAL_CSV) -> Optional[str]:
    """Moves the rows of ``ROOT_DIR/<name>`` (``eval.csv``) after
    ``env_steps`` to ``ROOT_DIR/eval-discarded-<time>.csv`` (for
    ``eval_held_out.csv``, ``eval_held_out-discarded-<time>.csv``).

    A run resumed from a checkpoint older than its last evaluations (the
    newest checkpoints were removed, or it crashed between checkpoints)
    evaluates those steps again: their old rows come from a training
    history the resumed run discards. Moving them aside keeps ``eval.csv``
    one row per step, in order, and loses no data. A row that cannot be
    read (cut short by a crash) goes aside too.

    Returns:
        The path the rows went to, or None if there were none.
    """
    path = os.path.join(root_dir, name)
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "env_steps" not in rows[0]:
        return None
    column = rows[0].index("env_steps")

    def kept(row) -> bool:
        try:
            return (len(row) == len(rows[0])
                    and float(row[column]) <= env_steps)
        except ValueError:
            return False

    later = [r for r in rows[1:] if not kept(r)]
    if not later:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    stem = os.path.splitext(name)[0]
    aside = os.path.join(root_dir, f"{stem}-discarded-{stamp}.csv")
    n = 1
    while os.path.exists(aside):  # never overwrite an earlier one
        n += 1
        aside = os.path.join(root_dir, f"{stem}-discarded-{stamp}-{n}.csv")
    # The rows are written aside before eval.csv loses them.
    _write_rows(aside, [rows[0]] + later)
    _write_rows(path, [rows[0]] + [r for r in rows[1:] if kept(r)])
    return aside


def _write_rows(path: str, rows: list) -> None:
    """Writes ``rows`` as CSV atomically (temporary file, fsync, rename)."""
    with open(path + ".tmp", "w", newline="") as f:
        csv.writer(f).writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_eval_csv(path: str) -> Dict[str, list]:
    """Reads an ``eval.csv``: column name -> list of floats, by env steps.

    Rows repeated for the same env step count (a run resumed from an older
    checkpoint re-evaluates) keep the last one.
    """
    with open(path, newline="") as f:
        rows = {int(float(r["env_steps"])): r for r in csv.DictReader(f)}
    steps = sorted(rows)
    cols = rows[steps[0]].keys() if steps else EVAL_CSV_COLUMNS
    return {c: [float(rows[s][c]) for s in steps] for c in cols}
