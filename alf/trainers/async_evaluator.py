"""Evaluation in a background process (``TrainerConfig.async_eval``).

Synchronous evaluation stops training: rank 0 plays ``num_eval_episodes``
(and as many held-out ones) while the other ranks wait at the next
collective and the actors of asynchronous collection run out of policy
versions. On a slow simulator that is a large share of the wall clock
(`ppg_metadrive.gin`: 10 + 10 episodes of up to 1,000 steps every 20k
training steps). Here an evaluator process owns the evaluation
environments and a copy of the policy: the learner sends it the policy's
acting state at the evaluation's env step and goes on training; the result
comes back later and is recorded under that env step.

* One evaluation runs at a time. One that falls due while another runs
  waits; a newer one replaces it (the learner logs that it was skipped),
  so a slow evaluator never builds a backlog.
* ``best.pt`` keeps the weights that were evaluated: the learner keeps a
  CPU copy of the checkpoint state of each evaluation in flight, and writes
  it as ``best.pt`` if the result is the best so far.
* The last evaluation is waited for (`wait`), so ``eval.csv`` ends at the
  run's last env step as with synchronous evaluation. On Ctrl-C or a crash
  the evaluation in flight is dropped (logged, the evaluator killed rather
  than waited for); the resumed run evaluates its checkpoint's step again
  if that one was due, but not an earlier step whose weights are gone.
* The evaluator never touches the process group (rank 0 owns it); it
  ignores the run's signals and dies with its parent, like the actors.

Messages (`actor.encode`d, over the evaluator's pipe):

* learner -> evaluator: ``("eval", env_steps, acting_state)``, ``("stop",)``;
* evaluator -> learner: ``("ready",)``, ``("result", env_steps, metrics,
  held_out_metrics or None, calibration or None)``, ``("error",
  kind, type name, one-line message, traceback)`` (`actor.report_error`).
"""
import dataclasses
import multiprocessing as mp
import pickle
import time
from typing import Any, Callable, Dict, List, NamedTuple, NoReturn, Optional

import gin
import gymnasium as gym
import torch
from absl import logging

from alf.trainers.actor import (adopt_config, decode, encode,
                                raise_reported, report_error, skip_shutdown)
from alf.trainers.calibration import Calibration
from alf.trainers.stall_watch import StoppedClock, doing, held_back
from alf.trainers.trainer_config import (EVALUATION_LOAD_FNS,
                                         without_evaluation_envs)
from alf.utils import process
# EvaluationError is importable from here too, where it was first defined.
from alf.utils.errors import AlfError, EvaluationError

# The least time between two warnings of skipped evaluations, and between
# two of a long wait for one, in seconds.
_SKIP_WARNING_SECONDS, _WAIT_WARNING_SECONDS = 60.0, 120.0
# How long an evaluator that other ranks wait for may stay stopped (SIGSTOP)
# before `AsyncEvaluator.wait` gives it up (as `WorkerWatch`'s least limit).
_STOPPED_SECONDS = 5.0

#: Sent instead of an evaluation load function that does not pickle (a
#: gin-scoped ``@held_out/suite_metadrive.load``): the evaluator takes it
#: from gin, which it parses from the same bindings.
FROM_GIN = "from gin"


class EvalResult(NamedTuple):
    """A finished evaluation.

    Attributes:
        env_steps: the env steps trained when the policy was taken.
        metrics: the evaluation's averages (as `Evaluator.evaluate`).
        held_out: the held-out evaluation's, or None.
        snapshot: the checkpoint state at ``env_steps`` (for ``best.pt``),
            or None: the state when ``best.pt`` is written (synchronous
            evaluation, or no best checkpoint kept).
        calibration: the offset the evaluation chose and played with
            (`alf.trainers.calibration`), or None.
    """
    env_steps: int
    metrics: Dict[str, float]
    held_out: Optional[Dict[str, float]]
    snapshot: Optional[dict] = None
    calibration: Optional[Calibration] = None


def evaluator_main(conn, gin_config: str, config, env_spec,
                   load_fns: Dict[str, Any]) -> None:
    """Entry point of the evaluator process (spawned by `AsyncEvaluator`).

    Args:
        conn: its end of the pipe to the learner.
        gin_config: the learner's ``gin.config_str()``.
        config: the run's `TrainerConfig` (`EVALUATION_LOAD_FNS` unset).
        env_spec: the learner's gymnasium registration of
            ``config.env_name``, if any (see `actor.actor_main`).
        load_fns: `EVALUATION_LOAD_FNS`' values: each a function,
            `FROM_GIN`, or None.
    """
    from alf.environments import env_fn
    from alf.trainers.calibration import make_calibrator
    from alf.trainers.evaluator import evaluate_together, make_evaluator
    env_fn.prepare_worker()
    torch.set_num_threads(1)
    evaluators: list = []
    calibrator = None
    try:
        adopt_config(gin_config, env_spec)
        if FROM_GIN in load_fns.values():
            from alf.trainers.trainer_config import TrainerConfig
            from_gin = TrainerConfig()
            load_fns = {k: getattr(from_gin, k) if f == FROM_GIN else f
                        for k, f in load_fns.items()}
        config = dataclasses.replace(config, **load_fns)
        evaluators.append(make_evaluator(config, config.env_load_fn))
        if config.held_out_env_load_fn is not None:
            evaluators.append(make_evaluator(
                config, config.held_out_env_load_fn,
                config.num_held_out_eval_episodes))
        calibrator = make_calibrator(config)
        algorithm = config.algorithm_ctor(
            observation_space=evaluators[0].observation_space,
            action_space=evaluators[0].action_space, config=config)
        conn.send_bytes(encode(("ready", )))
        while True:
            message = decode(conn.recv_bytes())
            if message[0] == "stop":
                break
            _, env_steps, state = message
            algorithm.load_acting_state(state)
            calibration = (None if calibrator is None
                           else calibrator.calibrate(algorithm))
            results = evaluate_together(evaluators, algorithm)
            conn.send_bytes(encode((
                "result", env_steps, results[0],
                results[1] if len(results) > 1 else None, calibration)))
    except (EOFError, OSError):
        pass  # the learner is gone
    except BaseException as e:  # noqa: BLE001 - reported to the learner
        report_error(conn, e)
    finally:
        for ev in evaluators + ([] if calibrator is None else [calibrator]):
            ev.close()
    skip_shutdown()


def _picklable(fn: Optional[Any]) -> Optional[Any]:
    """``fn``, or `FROM_GIN` where it does not pickle."""
    if fn is None:
        return None
    try:
        pickle.dumps(fn)
    except Exception:  # noqa: BLE001 - whatever pickle raises
        return FROM_GIN
    return fn


def snapshot(state: Any) -> Any:
    """A CPU copy of a checkpoint state (nested dicts, lists and tensors),
    unchanged by later training."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: snapshot(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(v) for v in state)
    return state


class AsyncEvaluator:
    """Rank 0's evaluations, played by a background process (see the
    module's doc).

    Args:
        config: the run's `TrainerConfig`.
    """

    def __init__(self, config) -> None:
        load_fns = {name: _picklable(getattr(config, name))
                    for name in EVALUATION_LOAD_FNS}
        config = without_evaluation_envs(config)
        spec = (gym.spec(config.env_name) if config.env_name in gym.registry
                else None)
        ctx = mp.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        # Not a daemon: its environments may run in subprocesses of their
        # own (MetaDrive's always do), which a daemon may not start. It
        # still dies with the learner (`env_fn.prepare_worker`), and
        # `close` stops it.
        self._proc = ctx.Process(
            target=evaluator_main, daemon=False, name="alf-evaluator",
            args=(theirs, gin.config_str(), config, spec, load_fns))
        with process.run_signals_held():  # its start-up: no traceback
            self._proc.start()
        theirs.close()
        self._ready = False
        # The evaluation being played and the one waiting for it, each as
        # (env_steps, acting state, snapshot).
        self._running: Optional[tuple] = None
        self._waiting: Optional[tuple] = None
        # Evaluations skipped since the last warning of it (their env
        # steps), and when that warning was given.
        self._skipped: List[int] = []
        self._skip_warned_at: Optional[float] = None

    def wait_ready(self) -> None:
        """Waits until the evaluator has built its environments and policy
        (so no evaluation is skipped while it starts, and a configuration
        mistake in them stops the run before training)."""
        while not self._ready:
            self.poll(timeout=1.0)

    @property
    def busy(self) -> bool:
        """Whether an evaluation is being played or waits to be."""
        return self._running is not None or self._waiting is not None

    def submit(self, env_steps: int, acting_state: dict,
               snapshot: Optional[dict] = None) -> None:
        """Asks for an evaluation of the policy whose `acting_state` is
        given, taken at ``env_steps``; ``snapshot`` is the checkpoint state
        to keep if it scores best. Returns at once."""
        request = (env_steps, acting_state, snapshot)
        if self._running is None and self._ready:
            self._send(request)
            return
        if self._waiting is not None:
            self._skip(self._waiting[0])
        self._waiting = request

    def _skip(self, env_steps: int) -> None:
        """Notes that the evaluation at ``env_steps`` is skipped: a warning
        the first time, then one a minute at most, with how many since
        (an ``eval_interval`` far shorter than an evaluation would skip,
        and say so, every iteration)."""
        self._skipped.append(env_steps)
        now = time.monotonic()
        if (self._skip_warned_at is not None and
                now - self._skip_warned_at < _SKIP_WARNING_SECONDS):
            return
        self._say_skipped(now)

    def _say_skipped(self, now: float) -> None:
        """Warns of the skipped evaluations not said yet."""
        steps = self._skipped
        which = (f"evaluation at {steps[0]} env steps" if len(steps) == 1
                 else f"{len(steps)} evaluations, at {steps[0]} to "
                 f"{steps[-1]} env steps,")
        logging.warning(
            "%s skipped: the evaluator was still busy (use a larger "
            "eval_interval, fewer num_eval_episodes, or async_eval=False)%s",
            which, "" if self._skip_warned_at is None else
            "; this is said once a minute at most")
        self._skipped, self._skip_warned_at = [], now

    def poll(self, timeout: float = 0.0) -> List[EvalResult]:
        """The evaluations finished so far (waits up to ``timeout`` s for
        the first message).

        Raises:
            EvaluationError: the evaluator failed or died (an `AlfError`
                with the evaluator's one line for a configuration mistake);
                `finished_before` gives the evaluations that finished
                before it, for the run to record.
        """
        done: List[EvalResult] = []
        try:
            while self._conn.poll(timeout):
                timeout = 0.0
                try:
                    message = decode(self._conn.recv_bytes())
                except (EOFError, OSError):
                    self._raise_dead()
                kind = message[0]
                if kind == "error":
                    raise_reported(message, "the evaluator process",
                                   EvaluationError)
                if kind == "ready":
                    self._ready = True
                elif kind == "result":
                    assert self._running is not None
                    _, env_steps, metrics, held_out, calibration = message
                    done.append(EvalResult(env_steps, metrics, held_out,
                                           self._running[2], calibration))
                    self._running = None
                if self._running is None and self._waiting is not None and \
                        self._ready:
                    request, self._waiting = self._waiting, None
                    self._send(request)
            if not done and not self._proc.is_alive() and \
                    not self._conn.poll():
                self._raise_dead()
        except AlfError as e:
            _finished_before(e, done)
            raise
        return done

    def wait(self, should_stop: Optional[Callable[[], bool]] = None,
             held: Optional[str] = None) -> List[EvalResult]:
        """Every evaluation submitted, once finished; or those finished
        when ``should_stop`` says so (checked every 0.1 s: the others stay
        in flight, dropped by `close`).

        Args:
            should_stop: whether to stop waiting.
            held: what an evaluator stopped (SIGSTOP, a debugger) holds
                back, when other ranks wait for this one in a collective
                ("rank 0's evaluation cannot finish"): the wait then fails
                once it has been stopped `_STOPPED_SECONDS`, before their
                collectives time out; None: wait.

        Raises:
            EvaluationError: as `poll`, with `finished_before`; or the
                evaluator was stopped (``held``).
        """
        done: List[EvalResult] = []
        start = said = time.monotonic()  # said: when the wait was said
        stopped = StoppedClock(time.monotonic)
        while self.busy and not (should_stop and should_stop()):
            try:
                done += self.poll(timeout=0.1)
                if held is not None and self.busy and stopped.seconds(
                        [(0, self._proc.pid)]).get(0, 0.0) >= \
                        _STOPPED_SECONDS:
                    raise EvaluationError(held_back(
                        f"the evaluator process {doing(self._proc.pid)}",
                        held))
            except AlfError as e:
                _finished_before(e, done)
                raise
            if time.monotonic() - said > _WAIT_WARNING_SECONDS and self.busy:
                # A stopped or stuck evaluator would hold the run silently.
                said = time.monotonic()
                steps = [r[0] for r in (self._running, self._waiting) if r]
                logging.warning(
                    "waiting %.0f s for the evaluation at %s env steps; the "
                    "evaluator process %s", said - start,
                    " and ".join(map(str, steps)), doing(self._proc.pid))
        return done

    def close(self) -> None:
        """Stops the evaluator (killing it if it does not stop in time, or
        at once if it is playing an evaluation that is dropped)."""
        if self._skipped:  # since the last (once a minute) warning
            self._say_skipped(time.monotonic())
        dropped = [r[0] for r in (self._running, self._waiting) if r]
        if dropped:
            why = ("training stopped before it finished"
                   if self._proc.is_alive() else "the evaluator ended first")
            logging.warning(
                "evaluation at %s env steps dropped, not recorded: %s",
                " and ".join(map(str, dropped)), why)
        try:
            self._conn.send_bytes(encode(("stop", )))
        except OSError:
            pass  # already gone
        # A busy evaluator reads "stop" only after its evaluation (minutes
        # on MetaDrive); its environments' workers die with it.
        self._proc.join(timeout=0.0 if self._running else 10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()

    def _send(self, request: tuple) -> None:
        env_steps, state, _ = request
        try:
            self._conn.send_bytes(encode(("eval", env_steps, state)))
        except OSError:
            self._raise_dead()
        self._running = request

    def _raise_dead(self) -> NoReturn:
        self._proc.join(timeout=5)
        raise EvaluationError("the evaluator process " +
                              process.describe_exit(self._proc.exitcode))


def finished_before(error: BaseException) -> List[EvalResult]:
    """The evaluations that finished before ``error`` that `poll` or
    `wait` raised (the evaluator's next evaluation failed): the run still
    records them."""
    return getattr(error, _FINISHED, [])


# The attribute of an error of `poll` or `wait` that `finished_before` reads.
_FINISHED = "alf_finished_evaluations"


def _finished_before(error: BaseException, done: List[EvalResult]) -> None:
    """Adds ``done`` (finished first) to ``error``'s `finished_before`."""
    setattr(error, _FINISHED, done + finished_before(error))
