"""What a run tells its user: TensorBoard summaries, the ``eval.csv`` rows,
the console lines, and the throughput they quote.

Rank 0 writes and logs; the other ranks join the collectives (the episode
statistics) and measure their own throughput.
"""
import contextlib
import math
import os
import threading
import time
from typing import (TYPE_CHECKING, Callable, Dict, Iterator, List, Optional,
                    Set)

import torch
from absl import logging

from alf.trainers.calibration import CALIBRATION_CSV
from alf.trainers.collection_counts import CollectionCounts
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.evaluator import (EVAL_CSV, HELD_OUT_CSV, append_eval_csv,
                                    read_eval_csv,
                                    set_aside_later_rows)

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from alf.trainers.collector import ActorReport

#: Each kind of evaluation: its TensorBoard folder (also its tags' prefix)
#: and its CSV file in ROOT_DIR.
EVALUATIONS = {"eval": EVAL_CSV, "eval_held_out": HELD_OUT_CSV}


class Reporter:
    """Writes summaries and evaluations, logs progress, measures throughput.

    Args:
        root_dir: the run's folder (TensorBoard folders and CSV files).
        episodes: the training episodes' statistics.
        counts: what the ranks collected (per-rank summaries, preemption).
        actor_report: the asynchronous actors' `ActorReport` (CPU per env
            step, waiting), or None where not measured.
        device: where the training statistics are (copied to the host once).
        num_env_steps: the run's budget of env steps (global).
        log_interval_seconds: the least time between progress lines.
        is_chief: whether this is rank 0, which writes.
        world_size: the number of ranks.
    """

    def __init__(self, root_dir: str, episodes: EpisodeStats,
                 counts: CollectionCounts,
                 actor_report: Callable[[], Optional["ActorReport"]],
                 device: torch.device, num_env_steps: int,
                 log_interval_seconds: float, is_chief: bool,
                 world_size: int):
        self._root_dir = root_dir
        self._episodes = episodes
        self._counts = counts
        self._actor_report = actor_report
        self._device = device
        self._num_env_steps = num_env_steps
        self._log_interval = log_interval_seconds
        self._is_chief = is_chief
        self._world_size = world_size
        self._writers: Dict[str, "SummaryWriter"] = {}
        # The writers whose failure was raised (`close` does not raise it
        # again: a writer keeps its failure).
        self._failed: Set[str] = set()
        self._purge_step = 1  # set by `open`
        # Throughput since `start_clock`: evaluation time is left out; the
        # learner's CPU seconds (train_iter, this rank) are added up.
        now = time.time()
        self._start_time, self._start_steps, self._start_iteration = now, 0, 0
        self._eval_seconds = 0.0
        self._learner_cpu = self._learner_wall = 0.0
        self._last_log = now

    # ---- set-up -----------------------------------------------------------
    def open(self, env_steps_at_start: int) -> None:
        """Opens the training summaries (rank 0), once the run knows where
        it resumes from."""
        # Resumed: TensorBoard then hides the earlier run's events after the
        # checkpoint (its discarded future), as eval.csv sets them aside. A
        # start without a checkpoint hides all earlier events (from a run
        # that failed before its first checkpoint).
        self._purge_step = env_steps_at_start + 1
        if self._is_chief:
            # Creating a writer writes its event file's start, the purge
            # mark: now for the evaluations' folders too that an earlier
            # run wrote, or their discarded events stay if this run
            # checkpoints past them before its first evaluation.
            for name in ("train", *(k for k in EVALUATIONS if os.path.isdir(
                    os.path.join(self._root_dir, k)))):
                with self._summaries(name):
                    pass

    def start_clock(self, iteration: int, env_steps: int) -> None:
        """Starts measuring throughput (collection has started)."""
        now = time.time()
        self._start_time, self._start_steps = now, env_steps
        self._start_iteration = iteration
        self._eval_seconds = self._learner_cpu = self._learner_wall = 0.0
        self._last_log = now

    def set_aside_discarded_evaluations(self, env_steps: int) -> None:
        """Moves the evaluations after ``env_steps`` out of the CSV files:
        they come from training this run discards, and it will evaluate
        those steps again."""
        for name in (*EVALUATIONS.values(), CALIBRATION_CSV):
            aside = set_aside_later_rows(self._root_dir, env_steps, name)
            if aside is None:
                continue
            if aside.whole:
                logging.warning(
                    "%s is not an evaluation log alf wrote (its first line "
                    "has no env_steps column: damaged?); moved it whole to "
                    "%s, and a new one starts", name, aside.path)
                continue
            moved = []
            if aside.later:
                moved.append(
                    f"{aside.later} evaluation(s) after {env_steps} env "
                    "steps, from training beyond the checkpoint resumed "
                    "from (or from a run without checkpoint)")
            if aside.unreadable:
                moved.append(f"{aside.unreadable} row(s) that cannot be "
                             "read (cut short, or damaged)")
            logging.warning("%s has %s; moved them to %s", name,
                            " and ".join(moved), aside.path)

    def evaluated(self, env_steps: int) -> bool:
        """Whether ``eval.csv`` holds an evaluation at ``env_steps``."""
        path = os.path.join(self._root_dir, EVAL_CSV)
        return (os.path.exists(path) and
                env_steps in read_eval_csv(path)["env_steps"])

    @contextlib.contextmanager
    def _summaries(self, name: str) -> Iterator["SummaryWriter"]:
        """The writer of the TensorBoard folder ``name``, flushed at the end
        (created on first use).

        Raises:
            OSError: a write failed. One from the writer's thread names no
                file: it gets the folder's path.
        """
        try:
            if name not in self._writers:
                # Imported here: tensorboard is slow to import, and a run
                # that is refused writes no event file.
                from torch.utils.tensorboard import SummaryWriter
                _hide_writer_thread_failures()
                self._writers[name] = SummaryWriter(
                    os.path.join(self._root_dir, name),
                    purge_step=self._purge_step)
            yield self._writers[name]
            self._writers[name].flush()
        except OSError as e:
            if e.filename is None:
                e.filename = os.path.join(self._root_dir, name)
            self._failed.add(name)
            raise

    # ---- training ---------------------------------------------------------
    def add_learner_cpu(self, seconds: float, wall: float = 0.0) -> None:
        """Counts CPU seconds this rank's learner spent in ``train_iter``,
        and the ``wall`` seconds it took: more wall than CPU is time the
        learner was runnable without a core (or waited in a collective)."""
        self._learner_cpu += seconds
        self._learner_wall += wall

    def steps_per_second(self, env_steps: int) -> float:
        """Training throughput since `start_clock`, excluding evaluation
        time."""
        elapsed = time.time() - self._start_time - self._eval_seconds
        return (env_steps - self._start_steps) / max(elapsed, 1e-9)

    def summarize(self, env_steps: int,
                  stats: Dict[str, torch.Tensor]) -> None:
        """Writes the iteration's training statistics, the episodes' and
        the ranks' since the last call, and the throughput (a collective:
        every rank calls it)."""
        episodes = self._episodes.take_interval()  # collective: every rank
        if not self._is_chief:
            return
        # One device-to-host copy for all of them (some may be on a GPU).
        values = torch.stack([v.detach().float().to(self._device)
                              for v in stats.values()]).tolist() if stats \
            else []  # an off-policy algorithm still collecting
        with self._summaries("train") as w:
            for name, value in zip(stats, values):
                w.add_scalar(f"train/{name}", value, env_steps)
            for name, value in episodes.items():
                w.add_scalar(f"rollout/{name}", value, env_steps)
            for name, value in self._counts.take_summaries().items():
                w.add_scalar(name, value, env_steps)
            w.add_scalar("time/steps_per_second",
                         self.steps_per_second(env_steps), env_steps)

    def log_progress(self, iteration: int, env_steps: int,
                     final: bool) -> None:
        """The console's progress line (rank 0), at most every
        ``log_interval_seconds`` and after the last iteration."""
        now = time.time()
        if not self._is_chief or (now - self._last_log < self._log_interval
                                  and not final):
            return
        self._last_log = now
        rate = self.steps_per_second(env_steps)
        left = self._num_env_steps - env_steps
        # The learner's CPU per env step of this rank: with ranks alike,
        # also all learners' core time per global env step.
        local_steps = (env_steps - self._start_steps) / self._world_size
        actors = self._actor_report()
        iters = max(iteration - self._start_iteration, 1)
        preempted = ", ".join(
            f"rank{r} {p / iters:.0%}" for r, p in
            enumerate(self._counts.preempted_iterations()))
        recent = self._episodes.recent_return()
        logging.info(
            "iter %d | env steps %d/%d | %.0f steps/s | recent return "
            "%s | time left %s | learner %.3f ms CPU/step (wall %.3f)"
            "%s%s",
            iteration, env_steps, self._num_env_steps, rate,
            "none yet" if math.isnan(recent) else f"{recent:.2f}",
            time.strftime("%H:%M:%S", time.gmtime(max(left, 0) / rate)),
            1000 * self._learner_cpu / max(local_steps, 1),
            1000 * self._learner_wall / max(local_steps, 1),
            "" if actors is None else
            " | actors %.3f ms CPU/step (env step %.3f; busy wall %.3f), "
            "waiting %.0f%% for a policy, slowest %s%.2fx the fastest%s | "
            "learner waiting %.0f%% for unrolls" % (
                actors.actor_ms, actors.env_ms, actors.busy_ms,
                100 * actors.actor_wait,
                "segment " if actors.segments else "", actors.actor_spread,
                "" if not actors.inference_batch else
                " | inference %.3f ms CPU/step (batch %.1f)" % (
                    actors.inference_ms, actors.inference_batch),
                100 * actors.learner_wait),
            f" | preempted {preempted}" if self._counts.preempting else "")

    # ---- evaluation -------------------------------------------------------
    @contextlib.contextmanager
    def evaluation_time(self) -> Iterator[None]:
        """Leaves the time spent inside out of the throughput."""
        start = time.time()
        yield
        self._eval_seconds += time.time() - start

    def record_evaluation(self, kind: str, metrics: Dict[str, float],
                          env_steps: int) -> None:
        """Writes an evaluation's metrics to TensorBoard and its CSV file.

        Args:
            kind: a key of `EVALUATIONS`.
            metrics: the evaluation's metrics.
            env_steps: the env steps trained when it was taken.
        """
        with self._summaries(kind) as w:
            for name, value in metrics.items():
                w.add_scalar(f"{kind}/{name}", value, env_steps)
        append_eval_csv(self._root_dir, env_steps, metrics, EVALUATIONS[kind])

    def record_calibration(self, rows: List[Dict[str, float]],
                           env_steps: int) -> None:
        """Appends a calibration's rows (one per candidate offset,
        `alf.trainers.calibration`) to ``calibration.csv``."""
        for row in rows:
            append_eval_csv(self._root_dir, env_steps, row, CALIBRATION_CSV)

    def log_evaluation(self, env_steps: int, metrics: Dict[str, float],
                       held_out: Optional[Dict[str, float]] = None) -> None:
        """The console's line for an evaluation (and its held-out one)."""
        other = "" if held_out is None else (
            "; held-out: return %.2f, episode length %.1f" % (
                held_out["average_return"],
                held_out["average_episode_length"]))
        offsets = " ".join(f"{k[len('offset_'):]}={v:+.3g}"
                           for k, v in metrics.items()
                           if k.startswith("offset_"))
        if offsets:
            other += f" (calibrated offset {offsets})"
        logging.info("eval at %d env steps: return %.2f, episode length "
                     "%.1f%s", env_steps, metrics["average_return"],
                     metrics["average_episode_length"], other)

    def close(self) -> None:
        """Closes the TensorBoard writers: all of them, even if one fails;
        a second call does nothing.

        Raises:
            OSError: the first writer that failed to write its last events
                (a failure raised before is not raised again).
        """
        failures = []
        for name, w in self._writers.items():
            try:
                w.close()
            except OSError as e:
                if name not in self._failed:
                    failures.append(e)
        self._writers.clear()
        if failures:
            raise failures[0]


#: The module of tensorboard's writer thread (`_hide_writer_thread_failures`).
_WRITER_THREAD_MODULE = "tensorboard.summary.writer.event_file_writer"
_next_excepthook = threading.excepthook


def _hide_writer_thread_failures() -> None:
    """Installs (once) `_quiet_excepthook` as ``threading.excepthook``."""
    global _next_excepthook
    if threading.excepthook is not _quiet_excepthook:
        _next_excepthook = threading.excepthook
        threading.excepthook = _quiet_excepthook


def _quiet_excepthook(args: "threading.ExceptHookArgs") -> None:
    """Prints a thread's failure (``threading.excepthook``), except an
    OSError in tensorboard's writer thread.

    That thread keeps its failure, and the writer raises it again in the
    training thread at the next call (`Reporter._summaries` flushes at
    once); there it becomes the run's one-line error, which a traceback
    ("Exception in thread ...") would drown.
    """
    if not (isinstance(args.exc_value, OSError) and
            type(args.thread).__module__ == _WRITER_THREAD_MODULE):
        _next_excepthook(args)
