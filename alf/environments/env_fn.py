"""Picklable environment constructors for worker subprocesses.

Kept free of torch imports: every environment subprocess unpickles them, and
importing torch there would cost each worker a second of CPU at start and
at exit.
"""
import contextlib
import faulthandler
import os
import signal
from typing import Iterator

import gymnasium as gym

from alf.utils import process


_environment_process = False


def set_environment_process() -> None:
    """Marks this process as one that exists to run environments (an actor
    of asynchronous collection): the suites' loaders then build their
    environments here, in this process, instead of in worker
    subprocesses."""
    global _environment_process
    _environment_process = True


def in_environment_process() -> bool:
    """Whether `set_environment_process` was called in this process."""
    return _environment_process


_evaluation_loads = 0


@contextlib.contextmanager
def evaluation_environments() -> Iterator[None]:
    """Environments loaded inside this block (by any thread of this
    process) will evaluate or replay a policy, not train it: a suite may
    then choose exactness over speed (`suite_metadrive.load` builds every
    episode anew). The evaluators and `alf.bin.play` load in it."""
    global _evaluation_loads
    _evaluation_loads += 1
    try:
        yield
    finally:
        _evaluation_loads -= 1


def loading_evaluation_environments() -> bool:
    """Whether an `evaluation_environments` block is open in this
    process."""
    return _evaluation_loads > 0


def prepare_worker() -> None:
    """Set-up of an environment worker subprocess.

    Ctrl-C, SIGTERM and SIGHUP are the training process's to handle (it
    closes this worker); the kernel ends the worker if that process dies
    without closing it. A native crash (a simulator's segmentation fault)
    prints the worker's Python stack to stderr before the process dies of
    its signal, which the training process then names: the run's log says
    which call crashed.
    """
    process.ignore_run_signals()
    process.die_with_parent(signal.SIGKILL)
    faulthandler.enable()


class EnvFn:
    """A picklable environment constructor.

    Args:
        env_name: an id or `gymnasium.envs.registration.EnvSpec`.
        max_episode_steps: overrides the registered time limit.
        env_kwargs: keyword arguments for ``gymnasium.make``.
        wrappers: callables ``env -> env``.
        in_worker: the constructor runs in its own worker subprocess.
            gymnasium's ``AsyncVectorEnv`` also calls the first constructor
            once in the process that creates it (to read the spaces); that
            call leaves the process's signal handling alone.
    """

    def __init__(self, env_name, max_episode_steps, env_kwargs, wrappers,
                 in_worker=False):
        self.args = (env_name, max_episode_steps, env_kwargs, wrappers)
        self.in_worker = in_worker
        self._owner_pid = os.getpid()

    def __call__(self) -> gym.Env:
        if self.in_worker and os.getpid() != self._owner_pid:
            prepare_worker()
        env_name, max_episode_steps, env_kwargs, wrappers = self.args
        env = gym.make(env_name, max_episode_steps=max_episode_steps,
                       disable_env_checker=True, **env_kwargs)
        for w in wrappers:
            env = w(env)
        return env
