"""`BatchedEnvironment`: the interface every environment suite implements.

The trainer, its collectors and actors, the evaluator and ``alf.bin.play``
talk to environments only through this interface, so a new suite is a
``load`` function returning a subclass; nothing outside the suite changes::

    class Chain(BatchedEnvironment):
        def __init__(self, num_envs):
            super().__init__(num_envs, gym.spaces.Box(0, 1, (4, )),
                             gym.spaces.Discrete(2))
        def reset(self, seed=None): ...   # -> TimeStep
        def step(self, action): ...       # -> TimeStep
        def close(self): ...

    def load(env_name, num_envs=1, seed=None, asynchronous=False):
        return Chain(num_envs)

    # gin: TrainerConfig.env_load_fn = @my_suite.load

Required: the three attributes that `__init__` sets and the abstract methods
`reset`, `step` and `close`; Python refuses to construct a subclass missing
one of the methods. Optional, with defaults: `episode_info` (no per-episode
metrics), `render` (raises `AlfError`), and for environments that step in
worker processes `worker_pids` and `watch` (a lock-step trainer then names a
worker that hangs, and a stop does not wait for it forever).

Training checks each `TimeStep` of a reset or step (`check_time_step`):
reward float [num_envs], terminated and truncated bool [num_envs], an
observation tensor's first dimension num_envs; a field of another shape or
kind stops the run in one line naming the suite and the field.
"""
import abc
from typing import Callable, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from alf.data_structures import TimeStep
from alf.utils.errors import AlfError, ConfigError

__all__ = ["BatchedEnvironment", "StepWatch", "check_environment",
           "check_time_step"]


class StepWatch:
    """What a `BatchedEnvironment` whose environments step in worker
    processes reports while a `BatchedEnvironment.step` waits for them
    (`BatchedEnvironment.watch`). The default does nothing."""

    def waiting(self, workers: Sequence[int], seconds: float) -> None:
        """About once a second while a step waits: the workers (indices
        into `BatchedEnvironment.worker_pids`) that have not answered, and
        how long the step has waited. May raise, which abandons the step:
        the environment can then only be closed (its workers are killed).
        """

    def stepped(self, seconds: float) -> None:
        """A step took ``seconds`` (every step, so it must be cheap)."""


class BatchedEnvironment(abc.ABC):
    """``num_envs`` environments stepped together, in torch tensors.

    Every tensor a `TimeStep` holds has a leading batch dimension [B]
    (``B = num_envs``) and lives on the CPU. Episodes restart in the same
    step that ends them (gymnasium's same-step autoreset): the `TimeStep`
    of a step that ends environment ``i``'s episode has ``terminated[i]``
    (the task ended: no bootstrap) or ``truncated[i]`` (a time limit: the
    learner bootstraps from the final observation) set, and its
    ``observation[i]`` already starts the next episode. Its
    ``final_observation`` is then a whole batch: the ended episodes' last
    observations in their rows, ``observation`` in the others (None on a
    step that ends no episode). So every step is a real transition.

    Attributes:
        num_envs: number of environments (the batch size B).
        observation_space: one environment's observation space (a
            gymnasium space: the algorithms size their networks from it).
        action_space: one environment's action space; an algorithm refuses
            kinds it does not declare in its ``supported_action_spaces``.

    Args:
        num_envs: see ``num_envs``.
        observation_space: see ``observation_space``.
        action_space: see ``action_space``.
    """

    def __init__(self, num_envs: int, observation_space: gym.Space,
                 action_space: gym.Space):
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space

    @abc.abstractmethod
    def reset(self, seed: Optional[int] = None) -> TimeStep:
        """Starts a new episode in every environment.

        Args:
            seed: if given, environment ``i`` is seeded with ``seed + i``
                (evaluations reset with the same seed to replay the same
                episode starts; the trainer gives each rank its own).
                Without it, the environments continue their own random
                streams (or use the seed their load function was given, at
                the first reset).

        Returns:
            The first observations, zero rewards, and ``terminated`` and
            ``truncated`` all False.
        """

    @abc.abstractmethod
    def step(self, action: torch.Tensor) -> TimeStep:
        """Steps every environment (see the class doc for episode ends).

        Args:
            action: one action per environment, [B, ...] (int64 [B] for a
                Discrete space), on any device.

        Returns:
            The batched `TimeStep`. Its ``episode_info`` maps each name of
            `episode_info` to float [B]: the metric where an episode ended
            at this step, NaN elsewhere; it may be left empty on steps
            where no episode ended.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Releases the environments (subprocesses, simulators)."""

    @property
    def episode_info(self) -> Tuple[str, ...]:
        """Names of the per-episode metrics (e.g. ``"success_rate"``) that
        `step` reports in ``TimeStep.episode_info``; training summaries and
        evaluations average each over finished episodes, and
        ``eval.csv`` gets a column per name.

        Default: none.
        """
        return ()

    @property
    def worker_pids(self) -> List[int]:
        """The process ids of the workers the environments step in, by
        worker index; empty (the default) when they step in the caller's
        process."""
        return []

    def watch(self, watch: Optional[StepWatch]) -> None:
        """Has `step` report to ``watch`` while it waits for the workers
        of `worker_pids` (None: stop reporting). The default, for
        environments stepping in the caller's process, ignores it."""
        return None

    def render(self) -> np.ndarray:
        """The first environment's current frame, uint8 [H, W, 3], for
        ``alf.bin.play --record_file``.

        Default: no frames.

        Raises:
            AlfError: these environments do not render.
        """
        raise AlfError(f"{type(self).__name__} environments do not render "
                       "frames; play without --record_file")


def check_time_step(env: BatchedEnvironment, ts: TimeStep,
                    call: str = "step") -> TimeStep:
    """Returns ``ts`` if its fields have the interface's shapes: a suite's
    mistake (a reward of shape [B, 1]) otherwise fails far away, in
    episode statistics or in a loss, with a traceback.

    Raises:
        AlfError: naming the suite's class, the field, what it is and what
            it must be.
    """
    if not isinstance(ts, TimeStep):
        raise AlfError(
            f"{type(env).__name__}.{call} returned a {type(ts).__name__}; it "
            "must return an alf.data_structures.TimeStep (see "
            "alf.environments.batched)")
    n = env.num_envs
    for name, kind in (("reward", "float"), ("terminated", "bool"),
                       ("truncated", "bool")):
        value = getattr(ts, name)
        if (isinstance(value, torch.Tensor) and value.shape == (n, ) and (
                value.dtype == torch.bool if kind == "bool" else
                value.is_floating_point())):
            continue
        what = (f"shape {tuple(value.shape)}, {value.dtype}" if isinstance(
            value, torch.Tensor) else f"a {type(value).__name__}")
        raise AlfError(
            f"{type(env).__name__}.{call} returned TimeStep.{name} of {what}; "
            f"it must be a {kind} tensor of shape [num_envs] = [{n}] (see "
            "alf.environments.batched)")
    _check_observation(env, ts.observation, "observation", call)
    if ts.final_observation is not None:
        _check_observation(env, ts.final_observation, "final_observation",
                           call)
    return ts


def _check_observation(env: BatchedEnvironment, obs, name: str,
                       call: str) -> None:
    """A tensor [num_envs, *space.shape] (for an array space), or a nest of
    tensors [num_envs, ...] (a Dict or Tuple space's)."""
    n, space = env.num_envs, env.observation_space
    shape = tuple(getattr(space, "shape", None) or ())
    array = isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary,
                               gym.spaces.MultiDiscrete))
    for leaf in (obs, ) if isinstance(obs, torch.Tensor) else _leaves(obs):
        if not isinstance(leaf, torch.Tensor):
            what = f"a {type(leaf).__name__}"
        elif leaf.shape[:1] != (n, ):
            what = (f"shape {tuple(leaf.shape)}, whose first dimension is "
                    f"not num_envs ({n})")
        elif array and leaf is obs and tuple(leaf.shape[1:]) != shape:
            what = (f"shape {tuple(leaf.shape)}, not [num_envs, *the "
                    f"observation space's shape] = {(n, ) + tuple(shape)}")
        else:
            continue
        raise AlfError(f"{type(env).__name__}.{call} returned TimeStep.{name} "
                       f"of {what}; it must be a tensor (or, for a Dict or "
                       "Tuple space, a nest of tensors) with num_envs rows "
                       "(see alf.environments.batched)")


def _leaves(obs) -> list:
    if isinstance(obs, dict):
        return [x for v in obs.values() for x in _leaves(v)]
    if isinstance(obs, (tuple, list)):
        return [x for v in obs for x in _leaves(v)]
    return [obs]


def check_environment(env, load_fn: Callable) -> BatchedEnvironment:
    """Returns ``env`` if it is a `BatchedEnvironment`.

    The trainer and ``alf.bin.play`` call it on what a load function
    returned, so that a suite not implementing the interface fails here,
    naming its load function, rather than at the first missing attribute.

    Raises:
        ConfigError: naming ``load_fn`` and the type it returned.
    """
    if isinstance(env, BatchedEnvironment):
        return env
    # A functools.partial or another callable has no __name__.
    name = getattr(load_fn, "__name__", repr(load_fn))
    raise ConfigError(f"{name} returned a {type(env).__name__}, not an "
                      "alf.environments.batched.BatchedEnvironment; "
                      "subclass it (see that module's doc)")
