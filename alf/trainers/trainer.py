"""The training loop: unroll -> store -> train -> summaries -> eval -> ckpt.

`train` runs in one process; distributed training runs it in every rank with
the process group already set up. Rank 0 alone writes files and the console.
"""
import errno
import math
import os
import signal
import threading
import time
from typing import Dict, Optional

import gin
import torch
from absl import logging

from alf.environments.batched import check_environment
from alf.trainers.checkpointer import (Checkpointer, describe_mismatch,
                                      free_space)
from alf.trainers.collector import AsyncCollector, SyncCollector
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.evaluator import (EVAL_CSV, HELD_OUT_CSV, Evaluator,
                                    append_eval_csv, set_aside_later_rows)
from alf.trainers.preemption import make_preemption
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import distributed, process
from alf.utils.errors import (AlfError, CheckpointError, ConfigError,
                              TrainingError)

_SEED_STRIDE = 10007  # env seeds of a resumed run differ from the first run's


# What `Trainer._state` writes, checked before a checkpoint is used.
_CHECKPOINT_LAYOUT = {
    "algorithm": dict, "optimizers": list,
    "counters": {"iteration": int, "env_steps": int, "episodes": int},
    "rng": {"torch": torch.Tensor}}


def _first_detail(error: Exception) -> str:
    """The first informative line of a load_state_dict error."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    detail = lines[1] if len(lines) > 1 else (lines[0] if lines else
                                              type(error).__name__)
    return detail[:300]


class TrainingInterrupted(AlfError):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP): a checkpoint was saved and
    the run can be resumed.

    Attributes:
        exit_code: the shell's convention for the signal (128 + signum).
    """

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.exit_code = process.exit_code_for(signum)


class Trainer:
    """Trains ``config.algorithm_ctor`` on ``config.env_name``.

    Args:
        config: the global `TrainerConfig` (default: gin's).
        root_dir: where summaries, ``eval.csv``, ``config.gin`` and
            checkpoints go; an existing run there is resumed.
    """

    def __init__(self, root_dir: str, config: Optional[TrainerConfig] = None):
        self.global_config = config or TrainerConfig()
        self.root_dir = root_dir
        self.rank = distributed.get_rank()
        self.world_size = distributed.get_world_size()
        self.is_chief = self.rank == 0
        self.config = self.global_config.per_rank(self.world_size)
        self.iteration = 0
        self.env_steps = 0
        self.env_steps_at_start = 0
        self._rng_state = None
        self._stop_signal = 0  # the stop signal received, if any
        # SIGUSR1s received, and those a checkpoint was taken for. Only the
        # handler writes the first: a signal that lands while `_requests`
        # waits in its all-reduce is then served next time, not lost.
        self._checkpoints_asked = self._checkpoints_served = 0
        self.steps_per_second = float("nan")  # of the last train() call
        torch.set_num_threads(self.config.torch_num_threads)

    # ---- set-up -----------------------------------------------------------
    def _build(self) -> None:
        cfg = self.config
        # Same seed everywhere for the weights (they are also broadcast
        # under DDP); per-rank seeds below for everything stochastic.
        torch.manual_seed(cfg.seed)
        if cfg.unroll_mode == "async":
            self._collector = AsyncCollector(cfg)
        else:
            self._collector = SyncCollector(check_environment(
                cfg.env_load_fn(cfg.env_name, num_envs=cfg.num_envs,
                                seed=None, asynchronous=cfg.async_env),
                cfg.env_load_fn), cfg.unroll_length)
        obs_space, action_space, metrics = self._collector.describe()
        self.device = cfg.resolve_device()
        self.algorithm = cfg.algorithm_ctor(
            observation_space=obs_space, action_space=action_space,
            config=cfg).to(self.device)
        self._checkpointer = Checkpointer(os.path.join(self.root_dir, "ckpt"),
                                          cfg.max_checkpoints)
        self._episodes = EpisodeStats(cfg.num_envs, metrics)
        _check_best_metric(cfg.best_metric, metrics)
        # The best value so far (None: read best.json when first needed),
        # and a better evaluation whose best.pt is still to be written.
        self._best = self._best_pending = None
        self._evaluator = self._held_out = None
        self._writers = {}
        if self.is_chief:
            self._evaluator = self._make_evaluator(cfg.env_load_fn)
            if cfg.held_out_env_load_fn is not None:
                self._held_out = self._make_evaluator(
                    cfg.held_out_env_load_fn)

    def _make_evaluator(self, load_fn) -> Evaluator:
        cfg = self.config
        env = check_environment(load_fn(
            cfg.env_name, num_envs=cfg.num_eval_episodes, seed=None,
            asynchronous=cfg.async_env), load_fn)
        return Evaluator(env, seed=cfg.seed + 1_000_003,
                         deterministic=cfg.eval_deterministic)

    def _writer(self, name: str):
        if name not in self._writers:
            from torch.utils.tensorboard import SummaryWriter
            # Resumed: TensorBoard then hides the earlier run's events after
            # the checkpoint (its discarded future), as eval.csv sets them
            # aside.
            # A start without a checkpoint hides all earlier events (from a
            # run that failed before its first checkpoint).
            self._writers[name] = SummaryWriter(
                os.path.join(self.root_dir, name),
                purge_step=self.env_steps_at_start + 1)
        return self._writers[name]

    def _save_operative_config(self) -> None:
        text = gin.operative_config_str()
        path = os.path.join(self.root_dir, "config.gin")
        if os.path.exists(path):
            with open(path) as f:
                if f.read() == text:
                    return
            # Never overwrite what an earlier run wrote.
            path = os.path.join(self.root_dir,
                                f"config-resumed-{self.env_steps}.gin")
            logging.warning("the config differs from %s/config.gin; saving "
                            "this run's as %s", self.root_dir, path)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    # ---- checkpoints ------------------------------------------------------
    def _state(self) -> dict:
        return {
            "format": 1,
            "algorithm": self.algorithm.state_dict(),
            "optimizers": self.algorithm.optimizer_state_dict(),
            "counters": {"iteration": self.iteration,
                         "env_steps": self.env_steps,
                         "episodes": self._episodes.total_episodes},
            "rng": {"torch": torch.get_rng_state()},
        }

    def _restore(self) -> None:
        # Rank 0 reads the checkpoint and sends it to the others, so that
        # ranks on other machines need not see ROOT_DIR. Everything is
        # restored on every rank, the optimizer state included: DDP only
        # broadcasts parameters and buffers.
        path, state, error = None, None, None
        if self.is_chief:
            path = self._checkpointer.latest()
            try:
                state = (Checkpointer.load(path, _CHECKPOINT_LAYOUT) if path
                         else None)
            except AlfError as e:
                error = e
        path, state, error = distributed.broadcast_object((path, state, error))
        if error is not None:
            raise error
        if state is None:
            if self.is_chief:  # a restart that failed before any checkpoint
                self._set_aside_discarded_evaluations()
            return
        try:
            self.algorithm.load_state_dict(state["algorithm"])
            self.algorithm.load_optimizer_state_dict(state["optimizers"])
            counters = state["counters"]
        except (KeyError, RuntimeError, ValueError) as e:
            # torch's message lists every difference on its own line; name
            # the first one (the tensor and both shapes) instead.
            why = (describe_mismatch(state["algorithm"],
                                     self.algorithm.state_dict())
                   or _first_detail(e))
            raise CheckpointError(
                f"checkpoint {path} does not fit this config ({why}); use "
                "another --root_dir or the config it was trained with") from e
        self.iteration = counters["iteration"]
        self.env_steps = self.env_steps_at_start = counters["env_steps"]
        self._episodes.total_episodes = counters["episodes"]
        self._rng_state = state["rng"]["torch"]
        if self.is_chief:
            logging.info("resumed from %s (iteration %d, %d env steps)", path,
                         self.iteration, self.env_steps)
            if self.env_steps < self.global_config.num_env_steps:
                self._set_aside_discarded_evaluations()

    def _set_aside_discarded_evaluations(self) -> None:
        # Evaluations after the checkpoint come from training this run
        # discards; it will evaluate those steps again.
        for name in (EVAL_CSV, HELD_OUT_CSV):
            aside = set_aside_later_rows(self.root_dir, self.env_steps, name)
            if aside:
                logging.warning(
                    "%s has evaluations after %d env steps, from training "
                    "beyond the checkpoint resumed from (or from a run "
                    "without checkpoint); moved them to %s", name,
                    self.env_steps, aside)

    def _save_checkpoint(self) -> Optional[str]:
        if not self.is_chief:
            return None
        return self._checkpointer.save(self._state(), self.env_steps)

    # ---- the loop ---------------------------------------------------------
    def train(self) -> Dict[str, float]:
        """Trains until ``num_env_steps``; returns the last evaluation.

        Raises:
            TrainingInterrupted: on Ctrl-C, after saving a checkpoint.
            TrainingError: on a non-finite loss (no checkpoint is written).
        """
        restore_handlers = lambda: None  # noqa: E731
        try:
            # Inside: a failure half-way through building (an actor or the
            # evaluator's environment) must still stop the actors started.
            self._build()
            restore_handlers = _install_interrupt_handler(self)
            return self._train()
        except OSError as e:
            if e.errno not in _DISK_ERRNOS:
                raise
            raise TrainingError(_disk_failure(self.root_dir, e)) from e
        finally:
            # Closing under the handlers: a repeated signal must not break
            # off the closing of environments.
            try:
                self._close()
            finally:
                restore_handlers()

    def _train(self) -> Dict[str, float]:
        cfg, gcfg = self.config, self.global_config
        self._restore()
        distributed.activate_ddp(self.algorithm)
        if self.env_steps >= gcfg.num_env_steps:
            if self.is_chief:
                logging.info("the run in %s already finished (%d of %d env "
                             "steps); nothing to do", self.root_dir,
                             self.env_steps, gcfg.num_env_steps)
            return {}
        if self.is_chief:
            logging.info("training on %s%s", self.device,
                         f" in each of {self.world_size} processes"
                         if self.world_size > 1 else "")
            self._save_operative_config()
            # Now, so that importing tensorboard does not count against the
            # training throughput (and a refused run writes no event file).
            self._writer("train")
        torch_seed = (cfg.seed * _SEED_STRIDE + self.iteration +
                      self.rank * 7919 + 1)
        if self._rng_state is not None and self.world_size == 1:
            torch.set_rng_state(self._rng_state)
        else:  # a fresh run, or ranks other than the one that saved the RNG
            torch.manual_seed(torch_seed)
        env_seed = (cfg.seed + _SEED_STRIDE * self.iteration +
                    self.rank * cfg.num_envs)
        self._preemption = make_preemption(cfg, self.rank, self.world_size)
        self._collector.start(self.algorithm, self._episodes, env_seed,
                              self.iteration, torch_seed, self._preemption)

        last_eval = {}
        self._clock = (time.time(), self.env_steps)
        self._eval_seconds = 0.0
        self._learner_cpu = 0.0  # CPU seconds of train_iter, this rank
        # With preemption, per rank: [env steps, preempted iterations,
        # iterations] since the last summary, and preempted iterations since
        # this process began (for the console).
        self._rank_interval = torch.zeros(self.world_size, 3,
                                          dtype=torch.float64)
        self._preempted_total = torch.zeros(self.world_size,
                                            dtype=torch.float64)
        self._iteration_at_start = self.iteration
        self._run_rate = None  # env steps/s, for the preemption's rule
        self._last_log = time.time()
        try:
            while self.env_steps < gcfg.num_env_steps:
                iteration_start = time.perf_counter()
                collect_stats = self._collector.collect()
                collected = self._collected()
                steps = self.env_steps + collected
                learner_start = time.thread_time()
                try:
                    stats = self.algorithm.train_iter(
                        min(steps / gcfg.num_env_steps, 1.0))
                except TrainingError as e:
                    raise TrainingError(
                        f"{e} at iteration {self.iteration + 1} "
                        f"({steps} env steps); stopped without writing a "
                        "checkpoint") from e
                self._learner_cpu += time.thread_time() - learner_start
                self._collector.publish(self.iteration + 1)
                self._track_run_rate(collected,
                                     time.perf_counter() - iteration_start)
                stats.update(collect_stats)
                # Counters move only after a complete iteration, so a
                # checkpoint saved on interrupt is consistent.
                self.env_steps = steps
                self.iteration += 1
                final = self.env_steps >= gcfg.num_env_steps
                if self.iteration % cfg.summary_interval == 0 or final:
                    self._summarize(stats)
                if (cfg.eval_interval and self.iteration % cfg.eval_interval
                        == 0) or final:
                    last_eval = self._evaluate()
                if (cfg.sync_check_interval and
                        self.iteration % cfg.sync_check_interval == 0):
                    distributed.check_weights_equal(self.algorithm)
                if self.iteration % cfg.checkpoint_interval == 0 or final:
                    self._save_checkpoint()
                self._save_best()
                self._log_progress(final)
                stop, checkpoint = self._requests()
                if stop:
                    raise KeyboardInterrupt
                if checkpoint and not final:
                    self._checkpoint_on_request()
            self.steps_per_second = self._steps_per_second()
        except KeyboardInterrupt:
            path = self._save_checkpoint()
            sig = self._stop_signal or signal.SIGINT
            raise TrainingInterrupted(
                f"{process.signal_name(sig)}: stopped at {self.env_steps} env "
                f"steps; checkpoint {path} saved; run the same command to "
                "resume", sig) from None
        return last_eval

    def _collected(self) -> int:
        """Env steps all ranks collected this iteration; with preemption
        (ranks collect different amounts) one all-reduce, which also
        counts each rank's steps and whether it was preempted for the
        summaries."""
        if not self.config.preempt_stragglers or self.world_size == 1:
            return self.global_config.steps_per_iteration
        rows = torch.zeros(self.world_size, 2, dtype=torch.float64)
        rows[self.rank] = torch.tensor([float(self._collector.last_steps),
                                        float(self._collector.last_preempted)])
        rows = distributed.all_reduce_sum(rows)
        self._rank_interval[:, :2] += rows
        self._rank_interval[:, 2] += 1
        self._preempted_total += rows[:, 1]
        return int(rows[:, 0].sum())

    def _track_run_rate(self, steps: int, seconds: float) -> None:
        """Tells the preemption the run's recent env steps/s (collection
        and training; evaluation and checkpoints left out)."""
        if self._preemption is None:
            return
        rate = steps / max(seconds, 1e-9)
        self._run_rate = (rate if self._run_rate is None else
                          0.5 * self._run_rate + 0.5 * rate)
        self._preemption.set_run_rate(self._run_rate)

    def _rank_summaries(self) -> Dict[str, float]:
        """Per rank, since the last summary: env steps collected per
        iteration and the fraction of iterations it was preempted in."""
        sums, self._rank_interval = self._rank_interval, torch.zeros_like(
            self._rank_interval)
        if not sums[0, 2]:
            return {}
        out = {}
        for r, (steps, preempted, iters) in enumerate(sums.tolist()):
            out[f"collect/steps_per_iteration_rank{r}"] = steps / iters
            out[f"collect/preempted_fraction_rank{r}"] = preempted / iters
        return out

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Asks training to stop (and checkpoint) after this iteration."""
        self._stop_signal = self._stop_signal or int(signum)

    def request_checkpoint(self) -> None:
        """Asks for a checkpoint after this iteration; training goes on."""
        self._checkpoints_asked += 1

    def _requests(self):
        """(stop signal or 0, checkpoint now?), agreed by every rank.

        A control-flow decision: all ranks stop (or checkpoint) at the same
        iteration if any of them was asked to, whichever rank the signal
        reached; one all-reduce of two numbers.
        """
        asked = self._checkpoints_asked
        flags = distributed.all_reduce_max(torch.tensor(
            [float(self._stop_signal),
             float(asked > self._checkpoints_served)]))
        self._checkpoints_served = asked
        if flags[0] and not self._stop_signal:
            self._stop_signal = int(flags[0])
        return int(flags[0]), bool(flags[1])

    def _checkpoint_on_request(self) -> None:
        path = self._save_checkpoint()
        if self.is_chief:
            logging.warning("%s: checkpoint %s saved; training goes on",
                            process.signal_name(process.CHECKPOINT_SIGNAL),
                            path)

    # ---- reporting --------------------------------------------------------
    def _summarize(self, stats: Dict[str, torch.Tensor]) -> None:
        episodes = self._episodes.take_interval()  # collective: every rank
        if not self.is_chief:
            return
        w = self._writer("train")
        # One device-to-host copy for all of them (some may be on a GPU).
        values = torch.stack([v.detach().float().to(self.device)
                              for v in stats.values()]).tolist() if stats \
            else []  # an off-policy algorithm still collecting
        for name, value in zip(stats, values):
            w.add_scalar(f"train/{name}", value, self.env_steps)
        for name, value in episodes.items():
            w.add_scalar(f"rollout/{name}", value, self.env_steps)
        for name, value in self._rank_summaries().items():
            w.add_scalar(name, value, self.env_steps)
        w.add_scalar("time/steps_per_second", self._steps_per_second(),
                     self.env_steps)
        w.flush()

    def _evaluate(self) -> Dict[str, float]:
        if not self.is_chief:
            return {}
        start = time.time()
        metrics = self._evaluator.evaluate(self.algorithm)
        self._record_evaluation("eval", EVAL_CSV, metrics)
        self._keep_best(metrics)
        held_out = ""
        if self._held_out is not None:
            other = self._held_out.evaluate(self.algorithm)
            self._record_evaluation("eval_held_out", HELD_OUT_CSV, other)
            held_out = "; held-out: return %.2f, episode length %.1f" % (
                other["average_return"], other["average_episode_length"])
        self._eval_seconds += time.time() - start
        logging.info("eval at %d env steps: return %.2f, episode length "
                     "%.1f%s", self.env_steps, metrics["average_return"],
                     metrics["average_episode_length"], held_out)
        return metrics

    def _record_evaluation(self, writer: str, csv_name: str,
                           metrics: Dict[str, float]) -> None:
        w = self._writer(writer)
        for name, value in metrics.items():
            w.add_scalar(f"{writer}/{name}", value, self.env_steps)
        w.flush()
        append_eval_csv(self.root_dir, self.env_steps, metrics, csv_name)

    def _keep_best(self, metrics: Dict[str, float]) -> None:
        """Marks this evaluation for ``best.pt`` (`_save_best`) when it
        beats every earlier one of the run (this process's and, resumed,
        the earlier ones')."""
        name = self.config.best_metric
        value = metrics.get(name, float("nan")) if name else float("nan")
        if math.isnan(value):
            return
        if self._best is None:
            info = self._checkpointer.best()
            self._best = (info["value"] if info and info["metric"] == name
                          else -math.inf)
        if value > self._best:
            self._best = value
            self._best_pending = (name, value)

    def _save_best(self) -> None:
        """Writes the `_keep_best` found (after the iteration's regular
        checkpoint: on a full disk, that is the write that reports)."""
        if self._best_pending is not None:
            name, value = self._best_pending
            self._best_pending = None
            self._checkpointer.save_best(self._state(), self.env_steps,
                                         name, value)

    def _steps_per_second(self) -> float:
        """Training throughput since the start of this process, excluding
        evaluation time."""
        t0, s0 = self._clock
        elapsed = time.time() - t0 - self._eval_seconds
        return (self.env_steps - s0) / max(elapsed, 1e-9)

    def _log_progress(self, final: bool) -> None:
        now = time.time()
        if not self.is_chief or (now - self._last_log <
                                 self.config.log_interval_seconds and
                                 not final):
            return
        self._last_log = now
        rate = self._steps_per_second()
        left = self.global_config.num_env_steps - self.env_steps
        # The learner's CPU per env step of this rank: with ranks alike,
        # also all learners' core time per global env step.
        local_steps = (self.env_steps - self._clock[1]) / self.world_size
        actors = self._collector.cpu_per_step()
        iters = max(self.iteration - self._iteration_at_start, 1)
        preempted = ", ".join(
            f"rank{r} {p / iters:.0%}" for r, p in
            enumerate(self._preempted_total.tolist()))
        logging.info(
            "iter %d | env steps %d/%d | %.0f steps/s | recent return "
            "%.2f | time left %s | learner %.3f ms CPU/step%s%s",
            self.iteration, self.env_steps, self.global_config.num_env_steps,
            rate, self._episodes.recent_return(),
            time.strftime("%H:%M:%S", time.gmtime(max(left, 0) / rate)),
            1000 * self._learner_cpu / max(local_steps, 1),
            "" if actors is None else
            " | actors %.3f ms CPU/step (env step %.3f)" % actors,
            "" if self._preemption is None else f" | preempted {preempted}")

    def _close(self) -> None:
        for w in getattr(self, "_writers", {}).values():
            w.close()
        for env in (getattr(self, "_collector", None),
                    getattr(self, "_evaluator", None),
                    getattr(self, "_held_out", None)):
            if env is not None:
                env.close()


def _check_best_metric(name: Optional[str], episode_metrics) -> None:
    """Refuses a ``best_metric`` that evaluations do not report."""
    valid = ("average_return", "average_episode_length",
             *episode_metrics)
    if name is not None and name not in valid:
        raise ConfigError(f"TrainerConfig.best_metric={name!r} is not an "
                          f"evaluation metric here; valid: "
                          f"{', '.join(valid)} or None")
    return None


# A write into ROOT_DIR that fails for these is the disk's fault, not a bug.
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def _disk_failure(root_dir: str, error: OSError) -> str:
    """One line for a summary, eval.csv or config.gin write that failed
    (checkpoint writes say so themselves)."""
    return (f"cannot write {error.filename or root_dir}: "
            f"{error.strerror or error} ({free_space(root_dir)}); the "
            "checkpoints already "
            "saved are intact; free some space (or use another --root_dir) "
            "and run the same command to resume")


def _install_interrupt_handler(trainer: Trainer):
    """Makes the stop signals (Ctrl-C, SIGTERM, SIGHUP) stop ``trainer``
    cleanly after its iteration, and SIGUSR1 save a checkpoint then.

    In a single process a second Ctrl-C interrupts at once (the checkpoint is
    still saved). Under a launcher, every rank gets the signal (from the
    terminal, the scheduler and/or the launcher); repeats are ignored and the
    launcher aborts a rank that does not stop in time.

    Returns:
        A function that restores the previous handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    force_on_repeat = trainer.world_size == 1

    def stop(signum, frame):
        if trainer._stop_signal:
            if force_on_repeat and signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        trainer.request_stop(signum)
        if trainer.is_chief:
            logging.warning("%s: stopping after this iteration%s",
                            process.signal_name(signum),
                            " (Ctrl-C again to stop at once)"
                            if force_on_repeat and signum == signal.SIGINT
                            else "")

    def checkpoint(signum, frame):
        trainer.request_checkpoint()

    previous = {s: signal.signal(s, stop) for s in process.STOP_SIGNALS}
    previous[process.CHECKPOINT_SIGNAL] = signal.signal(
        process.CHECKPOINT_SIGNAL, checkpoint)

    def restore():
        for s, h in previous.items():
            signal.signal(s, h)

    return restore
