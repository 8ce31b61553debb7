"""Batched gymnasium environments that speak `TimeStep` and torch tensors.

`load` builds a gymnasium vector environment in same-step autoreset mode: when
an episode ends, ``step`` already returns the first observation of the next
episode and reports the true last observation in ``final_observation``. So
every step is a real transition (no wasted reset steps, unlike gymnasium's
default next-step mode), and a time-limit truncation can bootstrap from the
value of the observation that really ended the episode.
"""
import difflib
import functools
import inspect
import os
import re
import select
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import gin
import gymnasium as gym
import numpy as np
import torch
from absl import logging
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from alf import nest
from alf.data_structures import TimeStep
# BatchedEnvironment is importable from here too, for code written before
# it moved to alf.environments.batched.
from alf.environments.batched import BatchedEnvironment, StepWatch
from alf.environments.env_fn import EnvFn, in_environment_process
from alf.utils import process
from alf.utils.errors import AlfError, one_line

__all__ = ["load", "GymEnvironment", "check_env_id", "flatten_observation"]


def check_env_id(env_name: str) -> None:
    """Raises `AlfError` naming close matches if ``env_name`` is unknown."""
    if not isinstance(env_name, str):
        raise AlfError(f"environment id {env_name!r} is not a string; give "
                       "a registered gymnasium id, e.g. "
                       "TrainerConfig.env_name=\"CartPole-v1\"")
    if env_name in gym.registry:
        return
    close = difflib.get_close_matches(env_name, list(gym.registry), n=5)
    hint = f"did you mean one of {close}?" if close else (
        "see gymnasium.pprint_registry() for the registered ids")
    namespace = env_name.split("/")[0] if "/" in env_name else None
    if namespace == "ALE" and not any(
            k.startswith("ALE/") for k in gym.registry):
        # ale-py registers its ids when imported, not on installation.
        hint = ("Atari ids are registered by the ale-py package: install it "
                "(pip install ale-py) and import it (a gin file's "
                "'import ale_py')")
    raise AlfError(f"unknown environment id {env_name!r}; {hint}")


def _check_env_args(spec, max_episode_steps, env_kwargs,
                    render: bool = False) -> None:
    """Refuses arguments ``gymnasium.make`` would fail on deep inside the
    environment's constructor (or, for a time limit below 1, in its
    wrapper), naming the value and what is valid.

    Raises:
        AlfError: naming ``load.max_episode_steps`` or ``load.env_kwargs``.
    """
    if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool)
            or not isinstance(max_episode_steps, int) or max_episode_steps < 1):
        raise AlfError(f"load.max_episode_steps={max_episode_steps!r}; it "
                       "must be a positive integer, or None for the "
                       f"registered limit of {spec.id} "
                       f"({spec.max_episode_steps})")
    if env_kwargs is None:
        return
    if not isinstance(env_kwargs, dict) or not all(
            isinstance(k, str) for k in env_kwargs):
        raise AlfError(f"load.env_kwargs={env_kwargs!r}; it must be a dict "
                       "of keyword arguments for the environment, e.g. "
                       "{'render_mode': 'rgb_array'}")
    creator = spec.entry_point
    try:
        if isinstance(creator, str):
            creator = load_env_creator(creator)
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError, ImportError, AttributeError,
            gym.error.Error):  # e.g. DependencyNotInstalled: Box2D
        return  # gymnasium.make will say what is wrong with the entry point
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return  # it takes any keyword
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in env_kwargs if k not in names]
    if unknown == ["render_mode"] and render:
        raise AlfError(f"{spec.id} cannot render frames: its constructor "
                       "takes no render_mode (gymnasium's way to ask for "
                       "them); play it without a recording")
    if unknown:
        raise AlfError(f"load.env_kwargs={env_kwargs!r}: {spec.id} takes no "
                       f"argument {', '.join(map(repr, unknown))}; its "
                       f"arguments: {', '.join(names) or 'none'}")


def _to_tensor(x: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t.float() if t.dtype == torch.float64 else t


def _merge_final(obs, final_obs: np.ndarray, mask: np.ndarray):
    """Observation batch with rows ``mask`` replaced by ``final_obs`` rows."""
    idx = np.flatnonzero(mask)
    if isinstance(obs, np.ndarray):
        out = obs.copy()
        out[idx] = np.stack([final_obs[i] for i in idx])
        return out
    # Nested observations (dict spaces): final_obs[i] is a nest for env i.
    merged = nest.map_structure(np.copy, obs)
    for i in idx:
        nest.map_structure(lambda m, f: m.__setitem__(i, f), merged,
                           final_obs[i])
    return merged


# How `EnvironmentRaised` names an environment stepping in this process.
IN_PROCESS = "an in-process environment"


class EnvironmentWorkerDied(AlfError):
    """An environment's worker process died (killed, out of memory, a
    crash in native code): restarting from the last checkpoint may help."""
    retryable = True

    def whose(self, owner: str) -> "EnvironmentWorkerDied":
        """This error, saying whose environments they were (``owner``:
        "training", "rank 1's training"): the workers are numbered within
        their own vector environment."""
        text = re.sub(r"\benvironment worker", f"{owner} environment worker",
                      str(self))
        return type(self)(text.replace(IN_PROCESS, f"{IN_PROCESS} of {owner}"))

    def renamed(self, name: Callable[[int], str],
                in_process: Optional[str] = None) -> "EnvironmentWorkerDied":
        """This error, naming worker ``i`` (of its vector environment)
        ``name(i)`` (an evaluation's environment, each one its own vector
        environment: "evaluation environment 3's worker"), and an
        environment that raised in this process ``in_process``."""
        text = re.sub(r"\benvironment workers? ((?:\d+, )*\d+) of \d+",
                      lambda m: ", ".join(name(int(i)) for i in
                                          m.group(1).split(", ")), str(self))
        return type(self)(text if in_process is None else
                          text.replace(IN_PROCESS, in_process))


class EnvironmentRaised(EnvironmentWorkerDied):
    """An environment raised an exception in a step or reset: in its
    worker (which gymnasium then shuts down, after printing the
    traceback) or in this process (whose traceback `GymEnvironment` logs).
    Collection and evaluations fail on it as on a worker that died: the
    trainer saves the last complete iteration, and a restart (a simulator's
    rare crash) may get past it."""


# What a pipe to a dead worker raises.
_DEAD_PIPE = (EOFError, BrokenPipeError, ConnectionResetError)
# How often (ms) a watched step that waits for its workers reports.
_WATCH_POLL_MS = 1000


class GymEnvironment(BatchedEnvironment):
    """A gymnasium vector env as a `BatchedEnvironment`.

    A ``Discrete(n, start=s)`` action space is seen as ``Discrete(n)``:
    action ``i`` steps the environment with ``s + i``.

    Args:
        vec_env: a gymnasium vector env in same-step autoreset mode.
        clip_action: clip Box actions to the action space's bounds.
        seed: seed of the first `reset`.
        episode_info: metric name -> key of the sub-environments' ``info``
            at an episode's last step (e.g. ``{"success_rate":
            "arrive_dest"}``); the value is averaged over finished episodes
            in training summaries and evaluations.
    """

    def __init__(self, vec_env: gym.vector.VectorEnv, clip_action=True,
                 seed: Optional[int] = None,
                 episode_info: Optional[Dict[str, str]] = None):
        space = vec_env.single_action_space
        # Algorithms act in 0..n-1 (an index of their outputs): a Discrete
        # space's start is added where the action enters the environment.
        self._action_start = None
        if isinstance(space, gym.spaces.Discrete) and int(space.start):
            self._action_start = int(space.start)
            space = gym.spaces.Discrete(int(space.n))
        super().__init__(vec_env.num_envs, vec_env.single_observation_space,
                         space)
        self._env = vec_env
        # A worker died, or a step was abandoned with answers still to
        # come: close kills the workers (gymnasium's would wait for them).
        self._dead = False
        self._watch: Optional[StepWatch] = None
        self._polls: List[Any] = []  # the watch's, one per worker pipe
        self._first_seed = seed
        self._episode_info = dict(episode_info or {})
        space = self.action_space
        self._clip = (space.low, space.high) if (
            isinstance(space, gym.spaces.Box) and clip_action) else None

    @property
    def episode_info(self) -> Tuple[str, ...]:
        """The metric names of the constructor's ``episode_info``."""
        return tuple(self._episode_info)

    def reset(self, seed: Optional[int] = None) -> TimeStep:
        """Resets every sub-environment; env ``i`` gets seed ``seed + i``.

        Without ``seed``, the first reset uses the seed given to `load` and
        later ones continue the environments' own RNGs.
        """
        if seed is None:
            seed, self._first_seed = self._first_seed, None
        vec: Any = self._env  # an AsyncVectorEnv where watched
        obs, _ = self._call(
            vec.reset if self._watch is None else functools.partial(
                self._watched, vec.reset_async, vec.reset_wait), seed=seed)
        zeros = torch.zeros(self.num_envs)
        false = torch.zeros(self.num_envs, dtype=torch.bool)
        return TimeStep(self._obs(obs), zeros, false, false.clone())

    def render(self) -> np.ndarray:
        """The first sub-environment's current frame, uint8 [H, W, 3].

        Raises:
            AlfError: the environments were not loaded to render (the load
                function's ``render`` argument).
        """
        frames = self._env.render()
        if not frames or frames[0] is None:
            raise AlfError("these environments do not render frames; load "
                           "them with render=True")
        return np.asarray(frames[0])[..., :3]

    def step(self, action: torch.Tensor) -> TimeStep:
        """Steps every sub-environment with the batched ``action``."""
        a = action.cpu().numpy()
        if self._clip is not None:
            a = np.clip(a, *self._clip)
        if self._action_start is not None:
            a = a + self._action_start
        vec: Any = self._env  # an AsyncVectorEnv where watched
        obs, reward, terminated, truncated, info = self._call(
            vec.step if self._watch is None else functools.partial(
                self._watched, vec.step_async, vec.step_wait), a)
        final, episode_info = None, {}
        if "_final_obs" in info and info["_final_obs"].any():
            final = self._obs(_merge_final(obs, info["final_obs"],
                                           info["_final_obs"]))
            episode_info = self._final_metrics(info.get("final_info", {}))
        return TimeStep(self._obs(obs),
                        torch.from_numpy(reward.astype(np.float32)),
                        torch.from_numpy(terminated),
                        torch.from_numpy(truncated), final, episode_info)

    def _final_metrics(self, final_info: dict) -> Dict[str, torch.Tensor]:
        """Metric name -> float [B]: the value where an episode ended, NaN
        elsewhere (also where the environment did not report it)."""
        out = {}
        for name, key in self._episode_info.items():
            value = torch.full((self.num_envs, ), float("nan"))
            if key in final_info:
                mask = torch.from_numpy(np.asarray(final_info["_" + key]))
                got = torch.from_numpy(
                    np.asarray(final_info[key], dtype=np.float32))
                value[mask] = got[mask]
            out[name] = value
        return out

    def _obs(self, obs):
        if isinstance(obs, np.ndarray):
            return _to_tensor(obs)
        return nest.map_structure(_to_tensor, obs)

    @property
    def worker_pids(self) -> List[int]:
        """The sub-environments' worker processes (asynchronous only)."""
        return [p.pid for p in getattr(self._env, "processes", [])]

    def watch(self, watch: Optional[StepWatch]) -> None:
        """Reports to ``watch`` while a step waits for the workers (see
        `BatchedEnvironment.watch`); in-process environments ignore it."""
        self._watch = watch if self.worker_pids else None
        self._polls = []
        if self._watch is not None:
            # One poll object per pipe, made once: a step costs a system
            # call per worker more than gymnasium's own wait, 1-5% of an
            # 8-worker CartPole step (a MetaDrive step's is 100x longer).
            vec: Any = self._env  # an AsyncVectorEnv: it has workers
            for pipe in vec.parent_pipes:
                poll = select.poll()
                poll.register(pipe.fileno(), select.POLLIN)
                self._polls.append(poll)

    def _watched(self, send, wait, *args, **kwargs):
        """``AsyncVectorEnv.step`` (or ``reset``), as ``send`` (its
        ``step_async``) then ``wait``, telling the watch about once a
        second which workers it still waits for (gymnasium's own waits in
        a pipe's ``recv``, forever for a worker that hangs)."""
        assert self._watch is not None
        start = time.perf_counter()
        send(*args, **kwargs)
        try:
            # In order, as step_wait reads them; a dead worker's pipe is
            # ready too (step_wait then reads its EOF).
            for i, poll in enumerate(self._polls):
                while not poll.poll(_WATCH_POLL_MS):
                    self._watch.waiting(
                        [j for j in range(i, len(self._polls))
                         if not self._polls[j].poll(0)],
                        time.perf_counter() - start)
        except BaseException:
            self._dead = True  # the answers may still come: close kills
            raise
        out = wait()
        self._watch.stepped(time.perf_counter() - start)
        return out

    def close(self):
        """Closes the sub-environments (and their subprocesses, if any)."""
        if self._dead and self.worker_pids:
            self._abandon()
        else:
            self._env.close()

    def _call(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the vector env; a worker that died
        (its pipe broke) is an `EnvironmentWorkerDied` naming it.

        Raises:
            AlfError: a worker of these environments died, or a step was
                given up (`watch`), before: they can only be closed.
        """
        if self._dead:
            raise AlfError("these environments lost a worker, or a step of "
                           "theirs was given up: they can only be closed")
        try:
            return fn(*args, **kwargs)
        except AlfError:  # a watch's, or one that names its bad value
            raise
        except _DEAD_PIPE as e:
            pipes = getattr(self._env, "parent_pipes", None)
            if pipes is None or None in pipes:
                # The environment's own (a simulator's socket), raised in
                # process or re-raised from a worker that gymnasium shut
                # down after it: not a pipe of ours.
                raise self._raised(e) from e
            self._dead = True
            procs = getattr(self._env, "processes", [])
            # The pipe breaks as the worker dies, a moment before the
            # kernel reports it dead: wait that moment to name it.
            deadline = time.monotonic() + 2.0
            while (procs and all(p.is_alive() for p in procs)
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            dead = [(i, p.exitcode) for i, p in enumerate(procs)
                    if not p.is_alive()]
            which = "; ".join(f"environment worker {i} of {len(procs)} "
                              f"{process.describe_exit(code)}"
                              for i, code in dead) or (
                                  f"a pipe to the environment workers "
                                  f"broke ({type(e).__name__})")
            raise EnvironmentWorkerDied(which) from e
        except Exception as e:  # noqa: BLE001 - the environment's own
            if self._dead:  # the watch gave the step up (`_watched`)
                raise
            raise self._raised(e) from e

    def _raised(self, error: Exception) -> EnvironmentRaised:
        """The `EnvironmentRaised` for ``error``, which a sub-environment
        raised: gymnasium's ``AsyncVectorEnv`` re-raises a worker's (the
        last, where several failed), having closed their pipes."""
        self._dead = True
        what = f"{type(error).__name__}: {one_line(error)}"
        pipes = getattr(self._env, "parent_pipes", None)
        if pipes is None:
            logging.error("%s raised:", IN_PROCESS, exc_info=error)
            return EnvironmentRaised(f"{IN_PROCESS} raised {what} (its "
                                     "traceback is logged above)")
        failed = [i for i, pipe in enumerate(pipes) if pipe is None]
        if not failed:
            return EnvironmentRaised(f"an environment worker raised {what}")
        if len(failed) > 1:
            return EnvironmentRaised(
                f"environment workers {', '.join(map(str, failed))} of "
                f"{len(pipes)} raised exceptions, the last {what} (their "
                "tracebacks are printed above)")
        return EnvironmentRaised(
            f"environment worker {failed[0]} of {len(pipes)} raised {what} "
            "(its traceback is printed above)")

    def _abandon(self) -> None:
        """Ends the workers of a vector env that lost one: its own close
        would wait forever for answers to a step broken off. SIGKILL: they
        ignore SIGTERM (a job's stop must not end them before the trainer
        checkpoints), hold nothing worth saving, and one left alive would
        print a traceback when its pipe closes."""
        vec: Any = self._env  # an AsyncVectorEnv: only its pipes can break
        for p in vec.processes:
            if p.is_alive():
                p.kill()
        for pipe in vec.parent_pipes:
            if pipe is not None:
                pipe.close()
        for p in vec.processes:
            p.join(timeout=10)
        vec.closed = True  # its __del__ must not try again


@gin.configurable(module="suite_gym")
def flatten_observation(env: gym.Env) -> gym.Env:
    """``env`` with its observations flattened into one float vector
    (gymnasium's ``FlattenObservation``: a Dict or Tuple space's parts side
    by side, a Discrete one one-hot), for alf's networks, which take
    arrays. In gin: ``load.wrappers = (@flatten_observation,)`` (a gin
    reference to gymnasium's class itself cannot reach spawned workers)."""
    return gym.wrappers.FlattenObservation(env)


@gin.configurable(module="suite_gym")
def load(env_name: str,
         num_envs: int = 1,
         seed: Optional[int] = None,
         asynchronous: bool = False,
         max_episode_steps: Optional[int] = None,
         env_kwargs: Optional[dict] = None,
         wrappers: tuple = (),
         clip_action: bool = True,
         render: bool = False) -> GymEnvironment:
    """Creates ``num_envs`` copies of a gymnasium environment, batched.

    Args:
        env_name: a registered gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: number of sub-environments.
        seed: if given, the first ``reset()`` seeds the environments with
            ``seed, seed + 1, ...``; later resets continue their own RNGs.
        asynchronous: run each sub-environment in its own (spawned) process;
            worth it only for environments much slower than the policy.
            Ignored in an actor process of asynchronous collection
            (`env_fn.set_environment_process`), which is itself the
            environments' worker.
        max_episode_steps: overrides the registered time limit.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        wrappers: callables ``env -> env`` applied to each sub-environment.
        clip_action: clip continuous actions to the action space's bounds.
        render: make `GymEnvironment.render` return frames (gymnasium's
            ``render_mode="rgb_array"``).

    Raises:
        AlfError: if ``env_name`` is not a registered environment id, or
            for a ``max_episode_steps`` or ``env_kwargs`` it cannot take,
            or a missing extra the environment needs (gymnasium's
            ``DependencyNotInstalled``).
        EnvironmentNotBuilt: the environment's constructor raised.
    """
    check_env_id(env_name)
    if render:
        env_kwargs = dict(env_kwargs or {}, render_mode="rgb_array")
    _check_env_args(gym.spec(env_name), max_episode_steps, env_kwargs,
                    render)
    # The spec, not the id: spawned workers do not see environments that
    # were registered at run time (by a test, or a user's module).
    env_fns = [EnvFn(gym.spec(env_name), max_episode_steps, env_kwargs or {},
                     tuple(wrappers), in_worker=asynchronous)
               for _ in range(num_envs)]
    kw: Dict[str, Any] = dict(autoreset_mode=AutoresetMode.SAME_STEP)
    # An actor process is itself the environments' worker.
    vec: gym.vector.VectorEnv
    try:
        if asynchronous and not in_environment_process():
            with process.run_signals_held():  # the workers' start-up
                vec = AsyncVectorEnv(env_fns, context="spawn", **kw)
        else:
            vec = SyncVectorEnv(env_fns, **kw)
    except AlfError:
        raise
    except Exception as e:  # noqa: BLE001 - the environment's own
        raise _not_built(env_name, e) from e
    return GymEnvironment(vec, clip_action=clip_action, seed=seed)


class EnvironmentNotBuilt(AlfError):
    """An environment's constructor raised: a simulator that did not start
    (a port in use, a licence server) may start when the run restarts."""
    retryable = True


def _not_built(env_name: str, error: Exception) -> AlfError:
    """One line for an environment whose construction raised (gymnasium
    builds one in this process even for ``AsyncVectorEnv``, to read its
    spaces): a missing extra (not retryable), or the constructor's own
    failure, whose traceback is logged where it is seen once (not by each
    actor of asynchronous collection, whose error names where it was
    raised)."""
    what = f"{type(error).__name__}: {one_line(error)}"
    if isinstance(error, gym.error.DependencyNotInstalled):
        return AlfError(f"environment {env_name} cannot be built: {what}")
    if in_environment_process():
        frames = traceback.extract_tb(error.__traceback__)
        where = (f" (raised at {os.path.basename(frames[-1].filename)}:"
                 f"{frames[-1].lineno})" if frames else "")
    else:
        logging.error("building environment %s raised:", env_name,
                      exc_info=error)
        where = " (its traceback is logged above)"
    return EnvironmentNotBuilt(
        f"environment {env_name} could not be built: {what}{where}")
