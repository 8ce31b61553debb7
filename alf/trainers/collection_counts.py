"""How many env steps the ranks collected, agreed among them, and whether
any rank's collection failed."""
from typing import Dict, List, Optional

import torch

from alf.utils import distributed


class CollectionCounts:
    """The env steps all ranks collected in an iteration, and what the
    summaries, the console and the preemption rule need to know of it.

    Without straggler preemption every rank collects its fixed share and
    nothing is exchanged. With it, ranks collect different amounts, so
    `agree` all-reduces what each collected (the loop's env step counter
    must be the same on every rank) and keeps, per rank, the steps and how
    often the rank was preempted.

    Args:
        steps_per_iteration: the env steps of a full iteration (global).
        rank: this process's rank.
        world_size: the number of ranks.
        preempting: whether ranks may collect different amounts
            (``TrainerConfig.preempt_stragglers`` with several ranks).
    """

    def __init__(self, steps_per_iteration: int, rank: int, world_size: int,
                 preempting: bool):
        self.preempting = preempting
        self._steps_per_iteration = steps_per_iteration
        self._rank = rank
        self._world_size = world_size
        # Per rank: [env steps, preempted iterations, iterations] since the
        # last summary, and preempted iterations since this process began
        # (for the console).
        self._interval = torch.zeros(world_size, 3, dtype=torch.float64)
        self._preempted_total = torch.zeros(world_size, dtype=torch.float64)
        self._run_rate: Optional[float] = None

    def agree(self, steps: int, preempted: bool) -> int:
        """The env steps all ranks collected this iteration, given what
        this rank collected and whether it was preempted.

        A collective when preempting (one all-reduce): every rank calls it
        at every iteration.
        """
        if not self.preempting:
            return self._steps_per_iteration
        rows = torch.zeros(self._world_size, 2, dtype=torch.float64)
        rows[self._rank] = torch.tensor([float(steps), float(preempted)])
        rows = distributed.all_reduce_sum(rows)
        self._interval[:, :2] += rows
        self._interval[:, 2] += 1
        self._preempted_total += rows[:, 1]
        return int(rows[:, 0].sum())

    def agree_failure(self, failure: Optional[str]) -> Optional[str]:
        """What failed in this iteration's collection on any rank (the
        lowest such rank's ``failure``, a one-line reason), or None, given
        this rank's (None: none).

        A collective (one all-reduce, and a broadcast after a failure)
        with several ranks: every rank calls it at every iteration (and
        once as collection starts, `Trainer`'s start), so
        that all of them learn of a failure while they can still save the
        last complete iteration together.
        """
        if self._world_size == 1:
            return failure
        failed = torch.zeros(self._world_size, dtype=torch.float64)
        failed[self._rank] = float(failure is not None)
        failed = distributed.all_reduce_sum(failed)
        if not failed.any():
            return None
        src = int(failed.nonzero()[0])
        return distributed.broadcast_object(failure, src=src)

    def run_rate(self, steps: int, seconds: float) -> float:
        """The run's recent env steps/s, for the preemption rule, given an
        iteration's steps and its seconds of collection and training
        (evaluation and checkpoints left out)."""
        rate = steps / max(seconds, 1e-9)
        # Smoothed, so that one unusual iteration does not decide the
        # throughput rule's comparison (`Preemption.should_stop`) alone.
        self._run_rate = (rate if self._run_rate is None else
                          0.5 * self._run_rate + 0.5 * rate)
        return self._run_rate

    def take_summaries(self) -> Dict[str, float]:
        """Per rank, since the last call: env steps collected per iteration
        and the fraction of iterations it was preempted in (nothing when
        not preempting)."""
        sums = self._interval
        self._interval = torch.zeros_like(sums)
        if not sums[0, 2]:
            return {}
        out = {}
        for r, (steps, preempted, iters) in enumerate(sums.tolist()):
            out[f"collect/steps_per_iteration_rank{r}"] = steps / iters
            out[f"collect/preempted_fraction_rank{r}"] = preempted / iters
        return out

    def preempted_iterations(self) -> List[float]:
        """Per rank, the iterations it was preempted in since this process
        began."""
        return self._preempted_total.tolist()
