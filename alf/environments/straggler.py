"""A straggler on demand: one rank's collection made N times slower.

For tests and benchmarks of straggler preemption on one machine, where all
ranks are otherwise alike::

    TrainerConfig.env_load_fn = @straggler_load
    straggler_load.load_fn = @suite_gym.load
    straggler_load.ranks = (1, )
    straggler_load.slowdown = 2.0

The environments of the named ranks sleep after each step for
``slowdown - 1`` times the time since their previous step returned (their
own stepping plus the policy's inference), so the rank collects
``slowdown`` times slower, as on a machine that much slower. Sleeping
leaves the CPU to other processes, as a slower machine elsewhere would.

``delay`` adds a fixed number of seconds to every step of those ranks, as a
simulator that takes that much longer would. Unlike ``slowdown`` it does
not scale with the machine's load, so a test that needs the rank to stay
slower than the learner's training on a busy machine uses it.
``delay_spread`` makes that delay uneven as a simulator's is (MetaDrive's
step costs what its scenario's traffic costs): every episode of every
environment batch draws a factor ``exp(N(0, delay_spread))`` for its
steps' delay, from a generator seeded by the reset's seed.
"""
import os
import time
from typing import Callable, List, Optional, Sequence, Tuple

import gin
import numpy as np
import torch

from alf.data_structures import TimeStep
from alf.environments.batched import BatchedEnvironment, StepWatch
from alf.utils import distributed
from alf.utils.errors import ConfigError

#: Set in a helper process (an asynchronous collection actor) to the rank
#: it collects for, which has no process group of its own.
RANK_VARIABLE = "ALF_RANK"


def collecting_rank() -> int:
    """The rank this process collects for (0 outside distributed training)."""
    if distributed.is_distributed():
        return distributed.get_rank()
    return int(os.environ.get(RANK_VARIABLE, 0))


class SlowedEnvironment(BatchedEnvironment):
    """A `BatchedEnvironment` that steps ``slowdown`` times slower than the
    one it wraps (see the module's doc); the rest of the interface is the
    wrapped one's.

    Args:
        env: the environments to slow down.
        slowdown: how many times slower they step.
        delay: seconds added to every step.
        delay_spread: the spread of ``delay`` over episodes (see the
            module's doc).
    """

    def __init__(self, env: BatchedEnvironment, slowdown: float,
                 delay: float = 0.0, delay_spread: float = 0.0):
        super().__init__(env.num_envs, env.observation_space,
                         env.action_space)
        self._env, self._extra, self._delay = env, slowdown - 1.0, delay
        self._spread, self._factor = delay_spread, 1.0
        self._rng = np.random.default_rng()
        self._last: Optional[float] = None
        # Running mean of the period between steps.
        self._typical: Optional[float] = None
        # Sleep owed: a sleep overshoots by ~0.1 ms, which at CartPole's
        # fraction-of-a-millisecond steps would make the rank far slower
        # than asked; the overshoot is taken off the next sleep.
        self._owed = 0.0

    def reset(self, seed: Optional[int] = None) -> TimeStep:
        """Resets the wrapped environments."""
        out = self._env.reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._draw()
        self._last = time.perf_counter()
        return out

    def _draw(self) -> None:
        """A new episode's delay factor."""
        if self._spread:
            self._factor = float(np.exp(self._rng.normal(0.0,
                                                         self._spread)))

    def step(self, action: torch.Tensor) -> TimeStep:
        """Steps the wrapped environments, then sleeps (see the module's
        doc)."""
        out = self._env.step(action)
        now = time.perf_counter()
        if self._last is not None:
            period, typical = now - self._last, self._typical
            if typical is not None and period > 10 * typical:
                # A pause (the learner training between unrolls) is not
                # part of collecting: it would otherwise be stretched too.
                period = typical
            else:
                self._typical = (period if typical is None else
                                 0.9 * typical + 0.1 * period)
            self._owed += self._extra * period + self._delay * self._factor
            if self._spread and bool((out.terminated | out.truncated).any()):
                self._draw()
            if self._owed > 0:
                time.sleep(self._owed)
                self._owed -= time.perf_counter() - now
        self._last = time.perf_counter()
        return out

    def close(self) -> None:
        """Closes the wrapped environments."""
        self._env.close()

    @property
    def episode_info(self) -> Tuple[str, ...]:
        """The wrapped environments' metric names."""
        return self._env.episode_info

    @property
    def worker_pids(self) -> List[int]:
        """The wrapped environments' workers."""
        return self._env.worker_pids

    def watch(self, watch: Optional[StepWatch]) -> None:
        """Watches the wrapped environments' workers."""
        self._env.watch(watch)

    def render(self) -> np.ndarray:
        """The wrapped environments' frame."""
        return self._env.render()


@gin.configurable
def straggler_load(env_name: str, num_envs: int, seed=None,
                   asynchronous: bool = False,
                   load_fn: Optional[Callable] = None,
                   ranks: Sequence[int] = (1, ), slowdown: float = 2.0,
                   delay: float = 0.0, delay_spread: float = 0.0,
                   **kwargs):
    """``load_fn``'s environments, ``slowdown`` times slower and ``delay``
    seconds longer per step (spread over episodes by ``delay_spread``) in
    ``ranks`` (an ``env_load_fn`` for `TrainerConfig`); ``kwargs`` go to
    ``load_fn``."""
    if slowdown < 1 or delay < 0 or delay_spread < 0:
        raise ConfigError(
            f"straggler_load: slowdown={slowdown!r}, delay={delay!r}, "
            f"delay_spread={delay_spread!r}; valid: slowdown >= 1, delay "
            ">= 0 seconds and delay_spread >= 0")
    if load_fn is None:
        from alf.environments import suite_gym
        load_fn = suite_gym.load
    env = load_fn(env_name, num_envs=num_envs, seed=seed,
                  asynchronous=asynchronous, **kwargs)
    if (slowdown > 1 or delay > 0) and collecting_rank() in tuple(ranks):
        env = SlowedEnvironment(env, slowdown, delay, delay_spread)
    return env
