"""The training loop: unroll -> store -> train -> summaries -> eval -> ckpt.

`train` runs in one process; distributed training runs it in every rank with
the process group already set up. Rank 0 alone writes files and the console.

The trainer builds the run's units and drives them; each does one job:
collection (`collector`), the env steps the ranks agree they collected
(`collection_counts`), evaluation (`evaluator`), checkpoints and the config
(`run_state`), summaries, ``eval.csv`` and the console (`reporting`), stop
and checkpoint requests (`stop_requests`), and seeds (`seeds`).
"""
import errno
import functools
import os
import signal
import time
from typing import Any, Callable, Dict, Optional, Type, Union

import torch
from absl import logging

from alf.algorithms.deterministic_offset import CALIBRATED
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.environments.batched import check_environment
from alf.environments.suite_gym import EnvironmentWorkerDied
from alf.trainers import seeds
from alf.trainers.async_evaluator import (AsyncEvaluator, EvalResult,
                                          EvaluationError, finished_before,
                                          snapshot)
from alf.trainers.calibration import (Calibrator, check_algorithm,
                                      make_calibrator, offset_columns)
from alf.trainers.checkpointer import WRITE_ADVICE, free_space
from alf.trainers.collection_counts import CollectionCounts
from alf.trainers.collector import (AsyncCollector, CollectionError,
                                   CollectionStopped, SyncCollector)
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.evaluator import (EvaluationStopped, Evaluator,
                                    evaluate_together, make_evaluator,
                                    waited_for)
from alf.trainers.preemption import Preemption, make_preemption
from alf.trainers.reporting import Reporter
from alf.trainers.run_folder import check_run_folder
from alf.trainers.run_lock import RunLock
from alf.trainers.run_state import RunState
from alf.trainers.stop_requests import StopRequests, install_handlers
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import distributed, process
from alf.utils.errors import (AlfError, TrainingError, TrainingInterrupted,
                              one_line)


class _HelperFailed(Exception):
    """A helper process of some rank (an actor, an environment worker, the
    evaluator) failed, leaving every rank's state as the last complete
    iteration left it.

    Args:
        reason: its one line.
        error: the `AlfError` class to end with.
    """

    def __init__(self, reason: str, error: Type[AlfError]):
        super().__init__(reason)
        self.error = error


class Trainer:
    """Trains ``config.algorithm_ctor`` on ``config.env_name``.

    Args:
        root_dir: where summaries, ``eval.csv``, ``config.gin`` and
            checkpoints go; an existing run there is resumed.
        config: the run's `TrainerConfig` (default: gin's), not divided
            among ranks.

    Attributes:
        config: ``config`` as this rank runs it (`TrainerConfig.per_rank`):
            the global sizes, and this rank's as ``local_*``.
        iteration: training iterations done (resumed ones included).
        env_steps: env steps trained on, all ranks together.
        env_steps_at_start: ``env_steps`` of the checkpoint resumed from.
        steps_per_second: the throughput of the last `train` call.
        algorithm: what is trained (built by `train`).
        device: where it trains (set by `train`).
    """

    def __init__(self, root_dir: str, config: Optional[TrainerConfig] = None):
        self.root_dir = root_dir
        self.rank = distributed.get_rank()
        self.world_size = distributed.get_world_size()
        self.is_chief = self.rank == 0
        self.config = (config or TrainerConfig()).per_rank(self.world_size)
        self.iteration = 0
        self.env_steps = 0
        self.env_steps_at_start = 0
        self.steps_per_second = float("nan")
        # Built by `train` (`_build`), closed by `_close` even if building
        # failed half-way; the evaluators are rank 0's only.
        self.device: Optional[torch.device] = None
        self.algorithm: Optional[RLAlgorithm] = None
        self._collector: Optional[Union[SyncCollector, AsyncCollector]] = None
        self._episodes: Optional[EpisodeStats] = None
        self._run_state: Optional[RunState] = None
        self._counts: Optional[CollectionCounts] = None
        self._reporter: Optional[Reporter] = None
        self._evaluator: Optional[Evaluator] = None
        self._held_out: Optional[Evaluator] = None
        self._async_eval: Optional[AsyncEvaluator] = None
        self._calibrator: Optional[Calibrator] = None
        # Set when training starts: the straggler preemption (None when
        # off) and the torch RNG state of the checkpoint resumed from.
        self._preemption: Optional[Preemption] = None
        self._rng_state: Optional[torch.Tensor] = None
        # Whether an evaluation is due at this iteration's step, and the
        # iteration whose summaries were written last.
        self._evaluation_due = False
        self._summarized_at = 0
        self._started_at = 0  # the iteration this process resumed at
        self._stop_requests = StopRequests()
        torch.set_num_threads(self.config.torch_num_threads)

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Asks training to stop (and checkpoint) after this iteration."""
        self._stop_requests.request_stop(signum)

    def request_checkpoint(self) -> None:
        """Asks for a checkpoint after this iteration; training goes on."""
        self._stop_requests.request_checkpoint()

    def train(self) -> Dict[str, float]:
        """Trains until ``num_env_steps``; returns the last evaluation.

        Raises:
            TrainingInterrupted: on Ctrl-C, after saving a checkpoint.
            TrainingError: on a non-finite loss (no checkpoint is written),
                or a write into ``root_dir`` that failed (a full disk, a
                file made unwritable): the files written stay as they were.
        """
        restore_handlers: Callable[[], None] = lambda: None  # noqa: E731
        # Before anything is built or written: a second training in this
        # root dir would spoil the first's files.
        lock = RunLock.acquire(self.root_dir) if self.is_chief else None
        try:
            # Closing under the handlers: a repeated signal must not break
            # off the closing of environments.
            try:
                if self.is_chief:  # (the command line checked it first)
                    check_run_folder(self.root_dir)
                # Inside: a failure half-way through building (an actor or
                # the evaluator's environment) must still stop the actors
                # started.
                self._build()
                restore_handlers = install_handlers(
                    self._stop_requests, self.world_size, self.is_chief)
                result = self._train()
            except BaseException:
                # Quietly: the summary writers fail again for the same
                # reason (a full disk), which must not hide this failure.
                self._close(quietly=True)
                raise
            # The last summaries are written now: failing to is the run's
            # failure.
            self._close()
            return result
        except OSError as e:
            if not _is_write_failure(self.root_dir, e):
                raise
            raise TrainingError(self._write_failure(e)) from e
        finally:
            # The lock first: a signal landing once the handlers before
            # training are back must not leave it held.
            if lock is not None:
                lock.release()
            restore_handlers()

    # ---- set-up -----------------------------------------------------------
    def _build(self) -> None:
        cfg = self.config
        # Same seed everywhere for the weights (they are also broadcast
        # under DDP); per-rank seeds (`seeds`) for everything stochastic.
        torch.manual_seed(cfg.seed)
        if self.is_chief and cfg.async_eval:
            # First: it starts while the environments below are built.
            self._async_eval = AsyncEvaluator(cfg)
        if cfg.unroll_mode == "async":
            self._collector = AsyncCollector(cfg)
        else:
            self._collector = SyncCollector(check_environment(
                cfg.env_load_fn(cfg.env_name, num_envs=cfg.local_num_envs,
                                seed=None, asynchronous=cfg.async_env),
                cfg.env_load_fn), cfg.unroll_length)
        obs_space, action_space, metrics = self._collector.describe()
        self.device = cfg.resolve_device()
        assert cfg.algorithm_ctor is not None  # TrainerConfig refuses None
        self.algorithm = cfg.algorithm_ctor(
            observation_space=obs_space, action_space=action_space,
            config=cfg).to(self.device)
        check_algorithm(cfg, self.algorithm)
        if isinstance(self._collector, AsyncCollector):
            self._collector.check_algorithm(self.algorithm)
        self._episodes = EpisodeStats(cfg.local_num_envs, metrics)
        self._run_state = RunState(self.root_dir, self.algorithm,
                                   self._episodes, self.is_chief,
                                   cfg.max_checkpoints, cfg.best_metric,
                                   metrics, cfg.checkpoint_replay)
        self._counts = CollectionCounts(
            cfg.steps_per_iteration, self.rank,
            self.world_size, cfg.preempt_stragglers and self.world_size > 1)
        self._reporter = Reporter(
            self.root_dir, self._episodes, self._counts,
            self._collector.actor_report, self.device,
            cfg.num_env_steps, cfg.log_interval_seconds,
            self.is_chief, self.world_size)
        if self._async_eval is not None:
            self._async_eval.wait_ready()
        elif self.is_chief:
            self._evaluator = make_evaluator(cfg, cfg.env_load_fn)
            if cfg.held_out_env_load_fn is not None:
                self._held_out = make_evaluator(
                    cfg, cfg.held_out_env_load_fn,
                    cfg.num_held_out_eval_episodes)
            self._calibrator = make_calibrator(cfg)

    def _restore(self) -> None:
        """Resumes from the latest checkpoint, if any (a collective)."""
        assert self._run_state is not None and self._reporter is not None
        resumed = self._run_state.restore()
        if resumed is not None:
            self.iteration = resumed.iteration
            self.env_steps = self.env_steps_at_start = resumed.env_steps
            self._rng_state = resumed.rng
            interval = self.config.eval_interval
            self._evaluation_due = (
                resumed.evaluation_due if resumed.evaluation_due is not None
                else bool(interval) and self.iteration % interval == 0)
            assert self.algorithm is not None  # built by `_build`
            self.algorithm.on_resume(resumed.env_steps, resumed.local_note)
        # Evaluations after the checkpoint (all of them without one: a run
        # that failed before its first) come from training this run
        # discards; unless it had finished, it evaluates those steps again.
        if self.is_chief and self.env_steps < self.config.num_env_steps:
            self._reporter.set_aside_discarded_evaluations(self.env_steps)

    def _start(self) -> bool:
        """Resumes and starts collection; False if the run had finished."""
        cfg = self.config
        self._restore()
        # All built by `_build`.
        assert (self.algorithm is not None and self._collector is not None
                and self._episodes is not None and self._run_state is not None
                and self._reporter is not None)
        distributed.activate_ddp(self.algorithm)
        if self.env_steps >= cfg.num_env_steps:
            if self._owes_evaluation():
                logging.info("the run in %s finished (%d of %d env steps) "
                             "without its final evaluation (stopped or "
                             "killed); evaluating it", self.root_dir,
                             self.env_steps, cfg.num_env_steps)
            elif self.is_chief:
                logging.info("the run in %s already finished (%d of %d env "
                             "steps); nothing to do", self.root_dir,
                             self.env_steps, cfg.num_env_steps)
            return False
        if self.is_chief:
            # Here, past every refusal: a refused run says one line.
            for unused in (*cfg.unused_settings(self.algorithm),
                           *self.algorithm.idle_settings(cfg)):
                logging.warning("%s", unused)
            logging.info("training on %s%s", self.device,
                         f" in each of {self.world_size} processes"
                         if self.world_size > 1 else "")
            self._run_state.save_operative_config(self.env_steps)
        # Now, so that importing tensorboard does not count against the
        # training throughput (and a refused run writes no event file).
        self._reporter.open(self.env_steps_at_start)
        torch_seed = seeds.learner_torch_seed(cfg.seed, self.iteration,
                                              self.rank)
        if self._rng_state is not None and self.world_size == 1:
            torch.set_rng_state(self._rng_state)
        else:  # a fresh run, or ranks other than the one that saved the RNG
            torch.manual_seed(torch_seed)
        env_seed = seeds.env_seed(cfg.seed, self.iteration, self.rank,
                                  cfg.local_num_envs)
        self._preemption = make_preemption(cfg, self.rank, self.world_size)
        self._start_collection(env_seed, torch_seed)
        self._reporter.start_clock(self.iteration, self.env_steps)
        self._summarized_at = self._started_at = self.iteration
        return True

    def _start_collection(self, env_seed: int, torch_seed: int) -> None:
        """Starts the collector (the environments' first reset, or the
        actors'), with the ranks' agreement on whether that failed on any
        of them (a worker that died, or that a stop gave up waiting for):
        then every rank stops with the same one-line error, before its
        first iteration, and the checkpoint resumed from (if any) stays
        as it was: nothing since is worth saving. Any other failure (a bad
        input, a bug) is raised as it was on its rank, the others stopping
        with its one line instead of waiting for it in a collective."""
        assert (self._collector is not None and self._counts is not None
                and self._episodes is not None)
        failure, own = None, None
        try:
            self._collector.start(self.algorithm, self._episodes, env_seed,
                                  self.iteration, torch_seed,
                                  self._preemption, self._stop_asked)
        except Exception as e:  # noqa: BLE001 - agreed, then raised
            failure, own = one_line(e), e
        reason = self._counts.agree_failure(failure)
        if reason is None:
            return
        if own is not None and not isinstance(own, (
                CollectionError, CollectionStopped, EnvironmentWorkerDied)):
            # Not a helper's failure (a bad input, a bug): as it was, with
            # its type and traceback; the other ranks learnt of it.
            raise own
        stop, _ = self._stop_requests.agree()
        kept = (f"the checkpoint at {self.env_steps} env steps is as it was"
                if self.iteration else "nothing had been trained or saved")
        if stop:
            sig = self._stop_requests.signal or signal.SIGINT
            error: AlfError = TrainingInterrupted(
                f"{process.signal_name(sig)}: {reason}; stopped before the "
                f"first iteration: {kept}; run the same command to "
                f"{'resume' if self.iteration else 'start again'}", sig)
        else:
            error = CollectionError(
                f"{reason}; before the first iteration: {kept}, and a "
                f"restart {'resumes from it' if self.iteration else 'starts afresh'}")
        error.on_every_rank = True
        raise error

    # ---- the loop ---------------------------------------------------------
    def _train(self) -> Dict[str, float]:
        finished = not self._start()
        assert self._reporter is not None  # built by `_build`
        cfg = self.config
        last_eval: Dict[str, float] = {}
        try:
            if finished:
                return self._evaluate_finished_run()
            last_eval = self._make_up_evaluation()
            while self.env_steps < cfg.num_env_steps:
                stats = self._iterate()
                last_eval = self._end_iteration(stats) or last_eval
            self.steps_per_second = self._reporter.steps_per_second(
                self.env_steps)
        except RuntimeError as e:
            # The call-order check's error, which torch wraps with a stack
            # when a gradient all-reduce's callback raises it.
            wrapped = distributed.raised_in_callback(e)
            if wrapped is None:
                raise
            raise wrapped from None
        except _HelperFailed as failed:
            raise self._save_after_failure(str(failed),
                                           failed.error) from None
        except KeyboardInterrupt:
            if not finished:  # every rank is here (the ranks agreed)
                self._summarize()
            path = self._save()
            sig = self._stop_requests.signal or signal.SIGINT
            if self.env_steps >= cfg.num_env_steps and not (
                    self.is_chief and self._owes_evaluation()):
                # The stop came with the last iteration, which completed:
                # the run is finished, and "resume" would do nothing.
                if self.is_chief:
                    logging.warning(
                        "%s came as the run finished: %d env steps, "
                        "checkpoint %s saved", process.signal_name(sig),
                        self.env_steps, path)
                self.steps_per_second = self._reporter.steps_per_second(
                    self.env_steps)
                return last_eval
            raise self._interrupted(sig, path) from None
        return last_eval

    def _save_after_failure(self, reason: str,
                            error: Type[AlfError]) -> AlfError:
        """Every rank (the ranks agreed) saves the last complete iteration
        after a helper process of one of them failed (``error``: in
        collection, `CollectionError`, whose unroll is dropped, or rank
        0's evaluation, `EvaluationError`); returns the error to stop
        with: the stop asked for, if one was, else ``error``, which a
        restart resumes from that checkpoint."""
        self._summarize()
        # The dropped unroll's observations, which a checkpoint saved
        # after training never holds (training commits them).
        norm = self.algorithm.observation_normalizer if self.algorithm else None
        if norm is not None:
            norm.take_pending()
        stop, _ = self._stop_requests.agree()
        # Before the first iteration there is nothing to resume from (a
        # stop saves it all the same, as a stop then always does).
        path = self._save() if self.iteration or stop else None
        if stop:
            sig = self._stop_requests.signal or signal.SIGINT
            if self.is_chief:
                logging.warning("%s: %s%s", process.signal_name(sig), reason,
                                "; the iteration the stop waited for is "
                                "dropped" if error is CollectionError else "")
            return self._interrupted(sig, path)
        if not self.iteration:
            failed = error(f"{reason}; no iteration had completed, so no "
                           "checkpoint was saved")
        elif self.env_steps >= self.config.num_env_steps:
            # Training is over: a restart evaluates, and trains nothing.
            failed = error(f"{reason}; the final checkpoint, at "
                           f"{self.env_steps} env steps, is saved, and a "
                           "restart evaluates it")
        else:
            failed = error(
                f"{reason}; the checkpoint at {self.env_steps} env steps "
                "(the last complete iteration) is saved, and a restart "
                "resumes from it")
        failed.on_every_rank = True
        return failed

    def _collect(self) -> Dict[str, torch.Tensor]:
        """The collector's unroll, with the ranks' agreement on whether
        collection failed on any of them (an actor or an environment worker
        that died): then `_HelperFailed` on every rank, so that all
        save the last complete iteration. An actor's death fails an unroll
        before anything of it is stored; a worker's, in lock-step
        collection, may leave some of its steps stored, which nothing
        saves but an off-policy replay buffer (real transitions, a few
        more than the steps counted)."""
        assert self._collector is not None and self._counts is not None
        failure, stats = None, {}
        try:
            stats = self._collector.collect()
        except (CollectionError, CollectionStopped,
                EnvironmentWorkerDied) as e:
            failure = one_line(e)
        reason = self._counts.agree_failure(failure)
        if reason is not None:
            raise _HelperFailed(reason, CollectionError)
        return stats

    def _iterate(self) -> Dict[str, torch.Tensor]:
        """Collects and trains one iteration; returns its statistics."""
        assert (self.algorithm is not None and self._collector is not None
                and self._counts is not None and self._reporter is not None)
        cfg = self.config
        iteration_start = time.perf_counter()
        collect_stats = self._collect()
        collected = self._counts.agree(self._collector.last_steps,
                                       self._collector.last_preempted)
        steps = self.env_steps + collected
        learner_start = time.thread_time()
        learner_wall = time.perf_counter()
        version = self.iteration + 1
        # Only actors act while the learner trains: lock-step collection
        # acts with the learner's own weights after train_iter.
        self.algorithm.policy_ready = functools.partial(
            self._collector.publish, version) if isinstance(
                self._collector, AsyncCollector) else None
        try:
            stats = self.algorithm.train_iter(
                min(steps / cfg.num_env_steps, 1.0))
        except TrainingError as e:
            raise TrainingError(
                f"{e} at iteration {self.iteration + 1} ({steps} env "
                "steps); stopped without writing a checkpoint") from e
        self._reporter.add_learner_cpu(time.thread_time() - learner_start,
                                       time.perf_counter() - learner_wall)
        self._collector.publish(version)
        if self._preemption is not None:
            self._preemption.set_run_rate(self._counts.run_rate(
                collected, time.perf_counter() - iteration_start))
        stats.update(collect_stats)
        # Counters move only after a complete iteration, so a checkpoint
        # saved on interrupt is consistent.
        self.env_steps = steps
        self.iteration += 1
        return stats

    def _end_iteration(self, stats: Dict[str, torch.Tensor]
                       ) -> Dict[str, float]:
        """Summaries, evaluation and checkpoints due after an iteration,
        then the ranks' agreement on a stop (KeyboardInterrupt) or a
        checkpoint; returns the evaluation's metrics recorded now, if
        any."""
        assert (self.algorithm is not None and self._run_state is not None
                and self._reporter is not None)
        cfg = self.config
        final = self.env_steps >= cfg.num_env_steps
        checkpoint_due = (self.iteration % cfg.checkpoint_interval == 0 or
                          final)
        # With each checkpoint too: it counts every episode.
        if self.iteration % cfg.summary_interval == 0 or checkpoint_due:
            self._summarize(stats)
        self._evaluation_due = final or bool(
            cfg.eval_interval and self.iteration % cfg.eval_interval == 0)
        # Also after the run's first update (a method left undecorated
        # drifts from it) and before every periodic and final checkpoint
        # (a short run's last would pass unchecked).
        if cfg.sync_check_interval and (
                self.iteration % cfg.sync_check_interval == 0
                or checkpoint_due
                or self.iteration == self._started_at + 1):
            distributed.check_weights_equal(self.algorithm)
        # Before the evaluation (a calibrating one lasts minutes): a rank
        # killed during it keeps the iteration, and the run resumed from it
        # evaluates that step first.
        if checkpoint_due:
            self._save()
        failure = None
        try:
            evaluated = self._evaluate(self._evaluation_due, final)
        except (EvaluationError, EnvironmentWorkerDied) as e:
            # Rank 0's evaluator (or an evaluation environment's worker)
            # died: the iteration is complete, and every rank saves it.
            failure, evaluated = one_line(e), {}
        if checkpoint_due:
            self._save()  # again if the evaluation calibrated
        self._run_state.save_best(self.iteration, self.env_steps)
        self._reporter.log_progress(self.iteration, self.env_steps, final)
        stop, checkpoint, failed = self._stop_requests.agree_with(
            failure is not None)
        if failed:
            raise _HelperFailed(distributed.broadcast_object(failure),
                                EvaluationError)
        if stop:
            raise KeyboardInterrupt
        if checkpoint and not final:
            self._summarize()
            path = self._save()
            if self.is_chief:
                logging.warning("%s: checkpoint %s saved; training goes on",
                                process.signal_name(
                                    process.CHECKPOINT_SIGNAL), path)
        return evaluated

    def _summarize(self, stats: Optional[Dict[str, torch.Tensor]] = None
                   ) -> None:
        """Writes the summaries of this iteration (with the episodes since
        the last ones: a collective), unless written already."""
        assert self._reporter is not None  # built by `_build`
        if self._summarized_at != self.iteration:
            self._reporter.summarize(self.env_steps, stats or {})
            self._summarized_at = self.iteration

    def _save(self) -> Optional[str]:
        """Checkpoints this iteration (`RunState.save`); returns the path on
        rank 0."""
        assert self._run_state is not None  # built by `_build`
        return self._run_state.save(self.iteration, self.env_steps,
                                    self._evaluation_due)

    def _interrupted(self, sig: int,
                     path: Optional[str]) -> TrainingInterrupted:
        """The error a stop whose checkpoint is saved ends with, said now
        (on rank 0) and told to the launcher (`process.stop_saved`):
        closing the actors comes next, and a second Ctrl-C meanwhile, which
        aborts the ranks that have not saved, must neither abort this one
        nor leave its line unsaid."""
        if self.env_steps >= self.config.num_env_steps:
            error = TrainingInterrupted(
                f"{process.signal_name(sig)}: the final evaluation at "
                f"{self.env_steps} env steps was stopped; checkpoint {path} "
                "saved; run the same command to evaluate it", sig)
        else:
            error = TrainingInterrupted(
                f"{process.signal_name(sig)}: stopped at {self.env_steps} "
                f"env steps; checkpoint {path} saved; run the same command "
                "to resume", sig)
        if self.is_chief:
            logging.warning("%s", error)
            error.said = True
        process.stop_saved()
        return error

    def _make_up_evaluation(self) -> Dict[str, float]:
        """A resumed run evaluates first the checkpoint whose evaluation
        the stopped run did not record (it stopped while evaluating, or
        before its asynchronous evaluation came back): the checkpoint holds
        the weights that were due, so the curve gets its point instead of
        a gap. A stop during it ends the run before it trains (else no
        later run would owe that evaluation), and ``best.pt`` is written
        at once (the next iteration changes the weights evaluated)."""
        assert self._run_state is not None
        result: Dict[str, float] = {}
        failure = None
        if self._owes_evaluation():
            logging.info("evaluating at %d env steps, which the run that "
                         "saved it did not record (stopped or failed)",
                         self.env_steps)
            try:
                # Asynchronous evaluation too waits for it: a stop
                # meanwhile keeps it owed.
                result = self._evaluate(True, self._async_eval is not None)
            except (EvaluationError, EnvironmentWorkerDied) as e:
                # As after an iteration: every rank learns of it below
                # (and saves).
                failure = one_line(e)
            else:
                self._save()  # again if the evaluation calibrated
                self._run_state.save_best(self.iteration, self.env_steps)
        if self.env_steps_at_start > 0:  # every rank: a collective
            stop, _, failed = self._stop_requests.agree_with(
                failure is not None)
            if failed:
                raise _HelperFailed(distributed.broadcast_object(failure),
                                    EvaluationError)
            if stop:
                raise KeyboardInterrupt
        elif failure is not None:  # (a fresh run owes nothing)
            raise _HelperFailed(failure, EvaluationError)
        return result

    def _evaluate_finished_run(self) -> Dict[str, float]:
        """Rank 0 of a finished run whose final evaluation was stopped (or
        killed) evaluates the final checkpoint; the other ranks return at
        once, as no collective follows."""
        assert self._reporter is not None and self._run_state is not None
        if not self._owes_evaluation():
            return {}
        # As a resume does: eval.csv's row may come from other bindings.
        self._run_state.save_operative_config(self.env_steps)
        self._reporter.open(self.env_steps)
        # The other ranks have returned: nothing waits for it.
        result = self._evaluate(True, True, others_wait=False)
        if self._owes_evaluation():  # stopped
            raise KeyboardInterrupt
        self._save()  # again if the evaluation calibrated
        self._run_state.save_best(self.iteration, self.env_steps)
        return result

    def _owes_evaluation(self) -> bool:
        """Whether this rank is the chief and an evaluation is due at this
        step that ``eval.csv`` lacks (stopped, or killed: the step's
        checkpoint is saved before it)."""
        return (self.is_chief and self._evaluation_due and
                self._reporter is not None and
                not self._reporter.evaluated(self.env_steps))

    def _evaluate(self, due: bool, wait: bool,
                  others_wait: bool = True) -> Dict[str, float]:
        """Rank 0 evaluates (never calling a collective) when one is
        ``due``, or records the asynchronous evaluations that finished
        (with ``wait``, all of them, unless a stop comes first); returns
        the last evaluation's metrics recorded now ({} on the other ranks,
        or if none). With ``others_wait`` (the other ranks, if any, wait
        for it in a collective), one that a stopped helper holds back is
        given up (`EvaluationError`) before their collectives time out."""
        if not self.is_chief:
            return {}
        held = ("rank 0's evaluation cannot finish"
                if others_wait and self.world_size > 1 else None)
        if self._async_eval is not None:
            return self._evaluate_async(due, wait, held)
        if not due:
            return {}
        # All built by `_build` (the evaluator on the chief only).
        assert (self.algorithm is not None and self._evaluator is not None
                and self._run_state is not None and self._reporter is not None)
        evaluators = [self._evaluator] + (
            [] if self._held_out is None else [self._held_out])
        try:
            with self._reporter.evaluation_time(), waited_for(held):
                calibration = (None if self._calibrator is None else
                               self._calibrator.calibrate(self.algorithm,
                                                          self._stop_asked))
                results = evaluate_together(evaluators, self.algorithm,
                                            self._stop_asked)
        except EvaluationStopped as e:
            logging.warning("%s: the evaluation at %d env steps was stopped "
                            "and is not recorded%s", process.signal_name(
                                self._stop_requests.signal), self.env_steps,
                            f" ({e})" if str(e) else "")
            return {}
        held_out = results[1] if len(results) > 1 else None
        result = self._record(EvalResult(self.env_steps, results[0],
                                         held_out, None, calibration))
        return result.metrics

    def _stop_asked(self) -> bool:
        """Whether a stop was asked for: an evaluation under way is then
        abandoned (a calibrating one lasts minutes, past the launcher's
        grace); the step's checkpoint says it is due, so the resumed run
        evaluates it first."""
        return bool(self._stop_requests.signal)

    def _evaluate_async(self, due: bool, wait: bool,
                        held: Optional[str]) -> Dict[str, float]:
        assert (self._async_eval is not None and self.algorithm is not None
                and self._run_state is not None)
        if due:
            kept = (snapshot(self._run_state.state(self.iteration,
                                                   self.env_steps))
                    if self.config.best_metric else None)
            self._async_eval.submit(self.env_steps,
                                    self.algorithm.acting_state(), kept)
        try:
            results = self._async_eval.wait(self._stop_asked, held) \
                if wait else self._async_eval.poll()
        except AlfError as e:
            # The evaluator failed on a later evaluation than these.
            for r in finished_before(e):
                self._record(r)
            raise
        recorded = [self._record(r) for r in results]
        return recorded[-1].metrics if recorded else {}

    def _record(self, result: EvalResult) -> EvalResult:
        """Writes an evaluation (and its held-out one) to the CSV files,
        TensorBoard and the console, and marks it for ``best.pt`` (from
        its snapshot, or the current state without one); returns it as
        recorded (with its calibrated offset's columns)."""
        assert self._run_state is not None and self._reporter is not None
        if result.calibration is not None:
            result = self._adopt_calibration(result)
        steps = result.env_steps
        self._reporter.record_evaluation("eval", result.metrics, steps)
        self._run_state.keep_best(result.metrics, result.snapshot, steps)
        if result.held_out is not None:
            self._reporter.record_evaluation("eval_held_out", result.held_out,
                                             steps)
        self._reporter.log_evaluation(steps, result.metrics, result.held_out)
        return result

    def _adopt_calibration(self, result: EvalResult) -> EvalResult:
        """Acts (and checkpoints) with the offset the evaluation chose, and
        records its calibration; returns the result with ``offset_D``
        columns."""
        assert (self.algorithm is not None and self._reporter is not None
                and result.calibration is not None)
        chosen = result.calibration.chosen
        # An asynchronous evaluation chose in the evaluator's copy
        # (`check_algorithm` made sure the algorithm can take it).
        algorithm: Any = self.algorithm
        algorithm.set_calibrated_offset(chosen)
        assert self._run_state is not None
        self._run_state.changed()
        if result.snapshot is not None:  # best.pt acts as evaluated
            state = getattr(self.algorithm, CALIBRATED).state_dict()
            result.snapshot["algorithm"].update(
                {f"{CALIBRATED}.{k}": v.detach().to("cpu", copy=True)
                 for k, v in state.items()})
        self._reporter.record_calibration(result.calibration.rows(),
                                          result.env_steps)
        columns = offset_columns(chosen)
        return result._replace(
            metrics=dict(result.metrics, **columns),
            held_out=None if result.held_out is None else dict(
                result.held_out, **columns))

    def _close(self, quietly: bool = False) -> None:
        """Closes what `_build` built; ``quietly`` leaves out the summary
        writers' failure to write (the run is already failing)."""
        try:
            if self._reporter is not None:
                self._reporter.close()
        except OSError:
            if not quietly:
                raise
        finally:
            for part in (self._collector, self._evaluator, self._held_out,
                         self._calibrator, self._async_eval):
                if part is not None:
                    part.close()

    def _write_failure(self, error: OSError) -> str:
        """The one line for a write into ``root_dir`` that failed (a
        summary, eval.csv, config.gin; checkpoint writes say so
        themselves): what failed, what is kept, what to do."""
        latest = (self._run_state.checkpointer.latest()
                  if self._run_state is not None else None)
        free = (f" ({free_space(self.root_dir)})" if error.errno in
                (errno.ENOSPC, errno.EDQUOT) else "")
        kept = (f"the checkpoints saved (the latest {latest}) are intact"
                if latest else "no checkpoint was saved yet")
        return (f"cannot write {error.filename or self.root_dir}: "
                f"{error.strerror or error}{free}; {kept}; "
                f"{WRITE_ADVICE[error.errno]}, or use another --root_dir; "
                "then run the same command to "
                f"{'resume' if latest else 'start again'}")


def _is_write_failure(root_dir: str, error: OSError) -> bool:
    """Whether ``error`` is a write into ``root_dir`` that failed for one
    of `WRITE_ADVICE`'s reasons."""
    if error.errno in (errno.EACCES, errno.EPERM):
        # Not only files refuse (signalling a process does too): only
        # one of the run's files is a write failure.
        root = os.path.abspath(root_dir) + os.sep
        return bool(error.filename) and os.path.abspath(
            str(error.filename)).startswith(root)
    return error.errno in WRITE_ADVICE
