"""Straggler preemption across ranks (DD-PPO, Wijmans et al. 2020).

In synchronous data-parallel training every rank waits for the slowest one
at the first gradient all-reduce of each iteration. With preemption, a rank
ends its rollout early once ``sync_frac`` of all ranks have finished theirs,
provided it has collected at least ``min_fraction`` of the rollout. The
ranks then train on batches of different sizes, which PPO and PPG weight
exactly (`PPOAlgorithm`'s ``uneven_batches``), so the update is the one a
single process would make on the union of what the ranks collected.

The count of ranks done with unroll ``u`` is a counter under a key of its
own in the process group's store (``alf/preempt/<u>``): a rank that
finishes adds 1, a rank still collecting reads it. Reading costs a few
microseconds in the file store of a single machine and a round trip in
torchrun's TCP store, so a rank reads it at most every ``poll_seconds``, or
ten times as long as a read took, whichever is longer (at most ~10% of
collection goes to reading).
No collective is involved: the collector's loop (or its waiting learner)
asks, and collectives stay in the learner's fixed order.

When ending early pays: in lock-step collection a preempted rank's
environments stop, so the iteration trains on fewer samples at the same
learner cost. Ending the rollout ``dt`` seconds early drops ``r x dt``
steps (``r``: this rank's collection rate) and saves ``dt`` seconds for the
whole run, which raises the run's env steps/s ``R`` exactly when ``r < R``.
Where the learner dominates an iteration (CartPole's 20 epochs), even a
2x-slower rank collects faster than ``R`` and DD-PPO's rule alone lowers
the throughput below no preemption at all (docs/benchmarks.md). The
``"throughput"`` rule (the default) therefore also asks ``r < R``, with
``R`` the run's recent rate (`set_run_rate`); ``"always"`` is DD-PPO's
rule alone. Asynchronous collection drops nothing (actors go
on with the next unroll), so its cut follows the count alone.
"""
import math
import time
from typing import Optional

from absl import logging

from alf.utils import distributed
from alf.utils.errors import ConfigError

PREEMPT_RULES = ("throughput", "always")

def check_rule(rule: str) -> None:
    """Refuses an unknown ``TrainerConfig.preempt_rule`` (one line)."""
    if rule not in PREEMPT_RULES:
        raise ConfigError(f"TrainerConfig.preempt_rule={rule!r}; valid: "
                          f"{', '.join(PREEMPT_RULES)}")


#: How many old counters to keep before deleting them.
_KEEP = 4


class Preemption:
    """One rank's view of the "done" counters of the current unroll.

    Args:
        store: a ``torch.distributed.Store`` every rank shares.
        rank: this process's rank.
        world_size: number of ranks.
        sync_frac: a rank is preempted once ``ceil(sync_frac x world_size)``
            ranks finished the unroll.
        min_fraction: ... and once it has collected at least this fraction
            of its unroll.
        unroll_length: steps per environment of a full unroll.
        rule: ``"throughput"`` or ``"always"`` (see the module's doc).
        num_envs: this rank's environments (for its collection rate).
        poll_seconds: read the store at most this often.
    """

    def __init__(self, store, rank: int, world_size: int, sync_frac: float,
                 min_fraction: float, unroll_length: int,
                 rule: str = "always", num_envs: int = 1,
                 poll_seconds: float = 0.001):
        check_rule(rule)
        self._store, self._rank = store, rank
        self._rule, self._num_envs = rule, num_envs
        self._run_rate: Optional[float] = None
        self._began = 0.0
        self.needed = math.ceil(sync_frac * world_size - 1e-9)
        self.min_steps = max(1, math.ceil(min_fraction * unroll_length))
        self.poll_seconds = poll_seconds
        self._unroll: Optional[int] = None  # set by begin
        self._next_poll = 0.0
        self._fired = False

    def begin(self, unroll: int) -> None:
        """Starts watching the counter of ``unroll``."""
        self._unroll, self._fired, self._next_poll = unroll, False, 0.0
        self._began = time.perf_counter()
        if self._rank == 0 and unroll >= _KEEP:
            # Every rank is past unroll - _KEEP: they trained on it together.
            try:
                self._store.delete_key(self._key(unroll - _KEEP))
            except (RuntimeError, NotImplementedError):
                pass  # a store without deletion keeps a few bytes per unroll

    def should_stop(self, steps: int) -> bool:
        """Whether a rank that has collected ``steps`` of the unroll (per
        environment) should end it now."""
        if self._fired:
            return True
        if steps < self.min_steps:
            return False
        if self._rule == "throughput" and self._run_rate is not None:
            seconds = time.perf_counter() - self._began
            if steps * self._num_envs >= self._run_rate * seconds:
                return False  # collecting faster than the run trains
        return self.poll()

    def set_run_rate(self, steps_per_second: float) -> None:
        """The run's recent env steps/s (all ranks), for the
        ``"throughput"`` rule."""
        self._run_rate = steps_per_second

    def poll(self) -> bool:
        """Whether enough ranks finished the unroll, reading the store at
        most every ``poll_seconds`` (and never again once they have)."""
        if self._fired:
            return True
        now = time.perf_counter()
        if now < self._next_poll:
            return False
        self._fired = self.others_done()
        took = time.perf_counter() - now
        self._next_poll = now + max(self.poll_seconds, 10 * took)
        return self._fired

    def others_done(self) -> bool:
        """Whether enough ranks finished the unroll (reads the store)."""
        assert self._unroll is not None, "begin() was not called"
        key = self._key(self._unroll)
        return (self._store.check([key]) and
                int(self._store.get(key)) >= self.needed)

    def finished(self) -> None:
        """This rank has its whole unroll (counted for the others)."""
        assert self._unroll is not None, "begin() was not called"
        self._store.add(self._key(self._unroll), 1)

    @staticmethod
    def _key(unroll: int) -> str:
        return f"preempt/{unroll}"


# TrainerConfig's settings of preemption, which without
# ``preempt_stragglers`` do nothing.
_SETTINGS = ("sync_frac", "min_rollout_fraction", "preempt_rule")


def make_preemption(config, rank: int,
                    world_size: int) -> Optional[Preemption]:
    """The `Preemption` of ``config`` (a rank's `TrainerConfig`), or None
    when it is off or there is one process.

    Raises:
        ConfigError: preemption asked for outside a group that alf formed.
    """
    if not config.preempt_stragglers:
        given = [f"{n}={getattr(config, n)!r}" for n in _SETTINGS
                 if config.given(n)]
        if given and rank == 0:
            logging.warning("TrainerConfig.%s does nothing without "
                            "preempt_stragglers=True", ", ".join(given))
        return None
    if world_size == 1:
        logging.warning("TrainerConfig.preempt_stragglers=True does nothing "
                        "in a single process: it ends a straggling rank's "
                        "rollout under --distributed or torchrun")
        return None
    store = distributed.store()
    if store is None:
        raise ConfigError(
            "TrainerConfig.preempt_stragglers=True needs the process group "
            "that alf.bin.train forms (--distributed or torchrun)")
    preemption = Preemption(store, rank, world_size, config.sync_frac,
                            config.min_rollout_fraction,
                            config.unroll_length, config.preempt_rule,
                            config.local_num_envs)
    if preemption.min_steps >= config.unroll_length and rank == 0:
        # sac_pendulum.gin's unroll of 1 step, say: the all-reduce that
        # agrees on the unroll's size is paid for nothing.
        logging.warning(
            "TrainerConfig.preempt_stragglers=True with unroll_length=%d "
            "and min_rollout_fraction=%s: a rank must collect its whole "
            "unroll before it may stop, so none is ever preempted; raise "
            "unroll_length or lower min_rollout_fraction",
            config.unroll_length, config.min_rollout_fraction)
    if preemption.needed >= world_size and rank == 0:
        logging.warning(
            "TrainerConfig.sync_frac=%s with %d processes: a rank would be "
            "preempted only once all %d had finished, i.e. never; use at "
            "most %.2f to preempt one straggler", config.sync_frac,
            world_size, world_size, (world_size - 1) / world_size)
    return preemption
