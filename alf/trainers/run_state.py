"""A run's state on disk: what a checkpoint holds and how a run resumes
from it, the best checkpoint, and the operative config.

`Checkpointer` (beside this file) stores and finds the files; `RunState`
decides what goes into them and puts it back.
"""
import math
import os
import re
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple)

import gin
import torch
from absl import logging

from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.config import qualify_saved_selectors
from alf.trainers.checkpointer import (Checkpointer, aside_name,
                                      describe_mismatch)
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.run_folder import CKPT_DIR
from alf.utils import distributed
from alf.utils.errors import AlfError, CheckpointError, ConfigError

#: What `RunState.state` writes, checked before a checkpoint is used. Every
#: checkpoint alf wrote has it ("format": 1), so changing a key here makes
#: earlier runs unresumable.
CHECKPOINT_LAYOUT = {
    "algorithm": dict, "optimizers": list,
    "counters": {"iteration": int, "env_steps": int, "episodes": int},
    "rng": {"torch": torch.Tensor}}


class Resumed(NamedTuple):
    """The loop's counters from a checkpoint, and the torch RNG state of
    the rank that saved it."""
    path: str
    iteration: int
    env_steps: int
    rng: torch.Tensor
    #: Why this rank's own state (`RLAlgorithm.local_state`) was not
    #: restored; "" if it was, or if there was none to restore.
    local_note: str = ""
    #: Whether an evaluation was due at the checkpoint's step (None: a
    #: checkpoint from before alf recorded it).
    evaluation_due: Optional[bool] = None


class RunState:
    """Checkpoints the algorithm, its optimizers, the loop's counters and
    torch's RNG; restores them on every rank; keeps the best checkpoint.

    Only rank 0 (``is_chief``) writes; every rank restores.

    Args:
        root_dir: the run's folder (checkpoints go to ``ROOT_DIR/ckpt``).
        algorithm: what is trained (its weights and optimizers are saved).
        episodes: the training episodes' statistics (their count is saved).
        is_chief: whether this is rank 0.
        max_checkpoints: regular checkpoints kept (None: all).
        best_metric: the evaluation metric ``best.pt`` maximises (None:
            no best checkpoint).
        episode_metrics: the environments' episode metrics, which
            evaluations report besides return and episode length.
        restore_local: whether a resume restores each rank's own state
            saved beside the checkpoint (``TrainerConfig.checkpoint_replay``).

    Raises:
        ConfigError: ``best_metric`` is not a metric evaluations report.
    """

    def __init__(self, root_dir: str, algorithm: RLAlgorithm,
                 episodes: EpisodeStats, is_chief: bool,
                 max_checkpoints: Optional[int] = 5,
                 best_metric: Optional[str] = None,
                 episode_metrics: Sequence[str] = (),
                 restore_local: bool = True):
        check_best_metric(best_metric, episode_metrics)
        self.root_dir = root_dir
        self._restore_local_state = restore_local
        self.checkpointer = Checkpointer(os.path.join(root_dir, CKPT_DIR),
                                         max_checkpoints)
        self._algorithm = algorithm
        self._episodes = episodes
        self._is_chief = is_chief
        self._best_metric = best_metric
        # The best value so far (None: read best.json when first needed),
        # and a better evaluation whose best.pt is still to be written.
        self._best: Optional[float] = None
        self._best_pending: Optional[Tuple[str, float, Optional[dict],
                                           Optional[int]]] = None
        # The iteration whose checkpoint holds the current state, and its
        # path; whether rank 0's acting weights changed since (`changed`).
        self._saved: Optional[Tuple[int, Optional[str]]] = None
        self._changed = False

    def state(self, iteration: int, env_steps: int,
              evaluation_due: bool = False) -> dict:
        """What a checkpoint holds (see `CHECKPOINT_LAYOUT`; and
        ``evaluation_due``, which earlier checkpoints lack)."""
        return {
            "format": 1,
            "algorithm": self._algorithm.state_dict(),
            "optimizers": self._algorithm.optimizer_state_dict(),
            "counters": {"iteration": iteration,
                         "env_steps": env_steps,
                         "episodes": self._episodes.total_episodes},
            "rng": {"torch": torch.get_rng_state()},
            "evaluation_due": evaluation_due,
        }

    def save(self, iteration: int, env_steps: int,
             evaluation_due: bool = False) -> Optional[str]:
        """Writes a regular checkpoint on rank 0, and each rank's own state
        beside it; returns its path (None on other ranks).

        A checkpoint this iteration has already (restored, or saved before
        its evaluation) is not written again, unless the acting weights
        changed since (`changed`): then rank 0 rewrites its file.

        Args:
            iteration: the iteration done.
            env_steps: the env steps trained on.
            evaluation_due: whether an evaluation is due at this step (a
                resumed run whose ``eval.csv`` lacks it evaluates it first).
        """
        if self._saved is not None and self._saved[0] == iteration:
            if not (self._changed and self._is_chief):
                return self._saved[1]
        else:
            local = self._algorithm.local_state()
            if local:
                self.checkpointer.save_local(local, env_steps,
                                             distributed.get_rank(),
                                             distributed.get_world_size())
        path = None
        if self._is_chief:
            path = self.checkpointer.save(
                self.state(iteration, env_steps, evaluation_due), env_steps)
        self._saved, self._changed = (iteration, path), False
        return path

    def changed(self) -> None:
        """Notes that the acting weights changed within the iteration (an
        evaluation adopted a calibrated offset), so that `save` writes the
        iteration's checkpoint again."""
        self._changed = True

    def _restore_local(self, env_steps: int) -> str:
        """Every rank restores its own state saved with the checkpoint at
        ``env_steps`` (`RLAlgorithm.local_state`), or none does (a
        collective): ranks that differ in what they hold could disagree
        on when to train, which would break their lockstep.

        Returns:
            Why this rank's was not restored ("" if it was, or if there
            was none and it was not asked for).

        Raises:
            CheckpointError: some ranks' states were restored, and another
                rank's does not fit (on every rank).
        """
        if not self._restore_local_state:
            return "TrainerConfig.checkpoint_replay=False"
        rank, world = distributed.get_rank(), distributed.get_world_size()
        name = os.path.basename(self.checkpointer.local_path(env_steps, rank))
        state, problem = None, None
        try:
            state = self.checkpointer.load_local(env_steps, rank, world)
        except CheckpointError as e:  # said once, where it is used
            problem = str(e)
        if distributed.any_rank(state is None) or state is None:
            return (problem or f"no {name} beside the checkpoint"
                    if state is None else
                    "another process has none; all restore theirs or none")
        try:
            self._algorithm.load_local_state(state)
        except ValueError as e:  # the config's sizes changed
            problem = f"{name} does not fit this config: {e}"
        failed = problem is not None
        if not distributed.any_rank(failed):
            return ""
        if not distributed.any_rank(not failed):
            return problem or ""
        # Equal configs make this all or nothing; should it not be, the
        # ranks must not train on different footings.
        where = os.path.join(self.checkpointer.ckpt_dir,
                             f"local-{env_steps}-rank*.pt")
        raise CheckpointError(
            f"{where}: a rank's saved replay does not fit this config "
            f"({problem or 'on another rank'}); move these files away to "
            "resume without them")

    def restore(self) -> Optional[Resumed]:
        """Loads the latest checkpoint into the algorithm, its optimizers
        and the episode count, on every rank (a collective). Rank 0 moves
        a ``best.pt`` from after the checkpoint aside
        (`Checkpointer.set_aside_best`).

        Returns:
            The counters to resume from, or None without a checkpoint.

        Raises:
            CheckpointError: the checkpoint is unreadable, not one of this
                trainer's, or does not fit the algorithm.
        """
        # Rank 0 reads the checkpoint and sends it to the others, so that
        # ranks on other machines need not see ROOT_DIR. Everything is
        # restored on every rank, the optimizer state included: DDP only
        # broadcasts parameters and buffers.
        path, state, error = None, None, None
        if self._is_chief:
            gone = self.checkpointer.remove_partial_writes()
            if gone:
                logging.info("removed what a killed run left half-written "
                             "in %s: %s", self.checkpointer.ckpt_dir,
                             ", ".join(gone))
            path = self.checkpointer.latest()
            try:
                state = (Checkpointer.load(path, CHECKPOINT_LAYOUT) if path
                         else None)
            except AlfError as e:
                error = e
        path, state, error = distributed.broadcast_object((path, state, error))
        if error is not None:
            raise error
        if state is None:
            self._set_aside_discarded_best(0)
            return None
        alg = self._algorithm
        load_weights(alg, state["algorithm"], path, RESUME_ADVICE)
        try:
            alg.load_optimizer_state_dict(state["optimizers"])
            counters = state["counters"]
        except (KeyError, RuntimeError, ValueError) as e:
            raise CheckpointError(
                f"checkpoint {path} does not fit this config "
                f"({_first_detail(e)}); {RESUME_ADVICE}") from e
        self._episodes.total_episodes = counters["episodes"]
        local_note = self._restore_local(counters["env_steps"])
        due = state.get("evaluation_due")
        resumed = Resumed(path, counters["iteration"], counters["env_steps"],
                          state["rng"]["torch"], local_note,
                          due if isinstance(due, bool) else None)
        self._saved = (resumed.iteration, path if self._is_chief else None)
        if self._is_chief:
            logging.info("resumed from %s (iteration %d, %d env steps)", path,
                         resumed.iteration, resumed.env_steps)
        self._set_aside_discarded_best(resumed.env_steps)
        return resumed

    def _set_aside_discarded_best(self, env_steps: int) -> None:
        """On rank 0, moves ``best.pt`` aside if its evaluation came from
        training after ``env_steps``, which the resumed run discards: it
        must neither be played as this run's best nor be what this run's
        evaluations have to beat."""
        if not self._is_chief:
            return
        aside = self.checkpointer.set_aside_best(env_steps)
        if aside:
            self._best = None  # read best.json again: there is none now
            logging.warning(
                "the best checkpoint came from training beyond %d env steps, "
                "which this run discards; moved it to %s (and its record "
                "beside it)", env_steps, aside)
            self._best_of_kept_evaluations(env_steps)

    def _best_of_kept_evaluations(self, env_steps: int) -> None:
        """After the best was set aside: the best of the evaluations the
        run keeps (at or before ``env_steps``) is the one to beat. Its
        checkpoint becomes ``best.pt`` where one was kept at that step;
        else the next evaluation that beats it writes ``best.pt``."""
        name = self._best_metric
        best = self._best_evaluation(lambda steps: steps <= env_steps)
        if not name or best is None:
            return
        value, steps = best
        checkpoint = self.checkpointer.saved().get(int(steps))
        if checkpoint is not None:
            self.checkpointer.save_best(
                Checkpointer.load(checkpoint, CHECKPOINT_LAYOUT), int(steps),
                name, value)
            logging.warning("best.pt is now the checkpoint at %d env steps, "
                            "the best evaluation kept (%s %g)", steps, name,
                            value)
        else:
            self._best = value
            logging.warning("the best evaluation kept (%s %g at %d env "
                            "steps) has no checkpoint left: best.pt will be "
                            "the first evaluation to beat it", name, value,
                            steps)

    def _best_evaluation(self, kept: Callable[[float], bool]
                         ) -> Optional[Tuple[float, float]]:
        """(value, env steps) of ``eval.csv``'s best ``best_metric`` among
        the rows whose env steps are ``kept`` (the earliest of equals), or
        None."""
        from alf.trainers.evaluator import EVAL_CSV, read_eval_csv
        path = os.path.join(self.root_dir, EVAL_CSV)
        if not self._best_metric or not os.path.exists(path):
            return None
        rows = read_eval_csv(path)
        values = [(value, steps) for steps, value in zip(
            rows["env_steps"], rows.get(self._best_metric, []))
                  if kept(steps) and not math.isnan(value)]
        return max(values, key=lambda k: (k[0], -k[1])) if values else None

    def _best_so_far(self, name: str, env_steps: Optional[int]) -> float:
        """The value an evaluation at ``env_steps`` must beat for
        ``best.pt``: ``best.json``'s; where ``best.pt`` has no readable
        record (a crash between the two writes, an edit), the best of
        ``eval.csv``'s other rows, so that a worse evaluation does not
        replace it."""
        info, problem = self.checkpointer.best_record()
        if info is not None:
            return info["value"] if info["metric"] == name else -math.inf
        if problem is None:  # no best.pt
            return -math.inf
        best = self._best_evaluation(lambda steps: steps != env_steps)
        logging.warning(
            "%s; best.pt is kept until an evaluation beats %s", problem,
            "nothing in eval.csv" if best is None else
            f"eval.csv's best ({name} {best[0]:g} at {best[1]:g} env steps)")
        return -math.inf if best is None else best[0]

    def keep_best(self, metrics: Dict[str, float],
                  state: Optional[dict] = None,
                  env_steps: Optional[int] = None) -> None:
        """Marks this evaluation for ``best.pt`` (`save_best`) when it
        beats every earlier one of the run (this process's and, resumed,
        the earlier ones').

        Args:
            metrics: the evaluation's.
            state: the checkpoint state that was evaluated, taken at
                ``env_steps`` (asynchronous evaluation, which finishes after
                training moved on); None: the state at `save_best`.
            env_steps: see ``state``.
        """
        name = self._best_metric
        value = metrics.get(name, float("nan")) if name else float("nan")
        if math.isnan(value):
            return
        assert name is not None  # a value was found under it
        if self._best is None:
            self._best = self._best_so_far(name, env_steps)
        if value > self._best:
            self._best = value
            self._best_pending = (name, value, state, env_steps)

    def save_best(self, iteration: int, env_steps: int) -> None:
        """Writes the `keep_best` found, if any (after the iteration's
        regular checkpoint: on a full disk, that is the write that
        reports)."""
        if self._best_pending is not None:
            name, value, state, taken_at = self._best_pending
            self._best_pending = None
            if state is None or taken_at is None:
                state, taken_at = self.state(iteration, env_steps), env_steps
            self.checkpointer.save_best(state, taken_at, name, value)

    def save_operative_config(self, env_steps: int) -> None:
        """Writes gin's operative config to ``ROOT_DIR/config.gin``; a run
        resumed at ``env_steps`` with another config than the one it
        resumes writes ``config-resumed-<env_steps>.gin`` instead.

        ``alf.bin.play`` rebuilds a checkpoint with the record of the last
        resume before it, so the records of resumes at or after
        ``env_steps`` (whose training this run discards, or which this run
        replaces) move to ``config-resumed-<S>-superseded-<time>.gin``,
        unless one at ``env_steps`` is this config: nothing is overwritten.
        """
        text = gin.operative_config_str()
        path = os.path.join(self.root_dir, "config.gin")
        if os.path.exists(path):
            # What alf.bin.play would rebuild this run's checkpoints with.
            resumed_with = path
            for steps, record in resumed_configs(self.root_dir):
                if steps < env_steps or (steps == env_steps and
                                         _same_config(record, text)):
                    resumed_with = record
                    continue
                aside = aside_name(self.root_dir,
                                   f"config-resumed-{steps}-superseded",
                                   (".gin",)) + ".gin"
                os.replace(record, aside)
                logging.warning("%s is the config of training this run "
                                "discards or replaces; moved it to %s",
                                record, aside)
            if _same_config(resumed_with, text):
                return
            path = os.path.join(self.root_dir,
                                f"config-resumed-{env_steps}.gin")
            logging.warning("the config differs from %s; saving this run's "
                            "as %s", resumed_with, path)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


#: The name of a resumed run's config (as ``alf.bin.play`` finds it).
_RESUMED_CONFIG = re.compile(r"config-resumed-(\d+)\.gin")


def resumed_configs(root_dir: str) -> List[Tuple[int, str]]:
    """The ``config-resumed-S.gin`` files of a run, ``(S, path)`` by S
    (not those moved aside as superseded)."""
    found = []
    for name in os.listdir(root_dir):
        m = _RESUMED_CONFIG.fullmatch(name)
        if m:
            found.append((int(m.group(1)), os.path.join(root_dir, name)))
    return sorted(found)


def _same_config(path: str, text: str) -> bool:
    """Whether the saved config ``path`` is the operative config ``text``
    (an older run's bare ``load`` selectors read as alf spells them now).
    """
    with open(path) as f:
        return qualify_saved_selectors(f.read()) == qualify_saved_selectors(
            text)


def check_best_metric(name: Optional[str],
                      episode_metrics: Sequence[str]) -> None:
    """Refuses a ``best_metric`` that evaluations do not report.

    Raises:
        ConfigError: naming the metrics that are valid.
    """
    valid = ("average_return", "average_episode_length", *episode_metrics)
    if name is not None and name not in valid:
        raise ConfigError(f"TrainerConfig.best_metric={name!r} is not an "
                          f"evaluation metric here; valid: "
                          f"{', '.join(valid)} or None")


#: What a checkpoint that does not fit leaves a resuming user to do.
RESUME_ADVICE = "use another --root_dir or the config it was trained with"


def load_weights(algorithm, weights: dict, path: str, advice: str) -> None:
    """``algorithm.load_state_dict(weights)``, the checkpoint file ``path``'s.

    Raises:
        CheckpointError: one line naming the first tensor that does not
            fit (its name and both shapes), then ``advice``.
    """
    try:
        algorithm.load_state_dict(weights)
    except (KeyError, RuntimeError, ValueError) as e:
        # torch's message lists every difference on its own line; name the
        # first one (the tensor and both shapes) instead.
        why = (describe_mismatch(weights, algorithm.state_dict())
               or _first_detail(e))
        raise CheckpointError(f"checkpoint {path} does not fit this config "
                              f"({why}); {advice}") from e


def _first_detail(error: Exception) -> str:
    """The first informative line of a load_state_dict error."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    detail = lines[1] if len(lines) > 1 else (lines[0] if lines else
                                              type(error).__name__)
    return detail[:300]
