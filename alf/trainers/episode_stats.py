"""Statistics of training episodes, kept in tensors and all-reduced."""
import collections
from typing import Deque, Dict, Optional, Sequence, Tuple

import torch

from alf.utils import distributed


class EpisodeStats:
    """Returns, lengths and per-episode metrics of training episodes.

    Args:
        num_envs: environments of this rank.
        metric_names: names in ``TimeStep.episode_info`` (e.g.
            ``success_rate``) to average over finished episodes.
        window: episodes kept for the console's "recent return".
    """

    def __init__(self, num_envs: int, metric_names: Sequence[str] = (),
                 window: int = 100):
        self._ret = torch.zeros(num_envs)
        self._len = torch.zeros(num_envs)
        self.metric_names = tuple(metric_names)
        self.recent: Deque[Tuple[float, float]] = collections.deque(
            maxlen=window)  # (return, length)
        # Sums since the last summary: [return, length, episodes] then, per
        # metric, [sum, count] (environments may not report every episode).
        self.interval = torch.zeros(3 + 2 * len(self.metric_names),
                                    dtype=torch.float64)
        self.total_episodes = 0

    def update(self, reward: torch.Tensor, done: torch.Tensor,
               episode_info: Optional[Dict[str, torch.Tensor]] = None
               ) -> None:
        """Adds one step's rewards; records the episodes that ``done``
        ends."""
        self._ret += reward
        self._len += 1
        if not done.any():
            return
        info = episode_info or {}
        self._record(self._ret[done], self._len[done],
                     {k: v[done] for k, v in info.items()})
        self._ret[done] = 0
        self._len[done] = 0

    def update_segment(self, reward: torch.Tensor, done: torch.Tensor,
                       episode_info: Dict[str, torch.Tensor],
                       columns: Sequence[int]) -> None:
        """Adds a segment of steps of some environments at once.

        Args:
            reward: [t, E] rewards of environments ``columns`` (indices
                into this rank's ``num_envs``), which continue the steps
                given before for them.
            done: bool [t, E], where their episodes ended.
            episode_info: ``{name: [t, E]}``, read where ``done``.
            columns: the environments the E columns are.
        """
        for e, col in enumerate(columns):
            ends = done[:, e].nonzero().flatten()
            total = reward[:, e].double().cumsum(0)
            if len(ends):
                at = total[ends]
                rets = torch.diff(at, prepend=at.new_zeros(1))
                rets[0] += self._ret[col]
                lens = torch.diff(ends + 1, prepend=ends.new_zeros(1))
                lens = lens.to(self._len.dtype)
                lens[0] += self._len[col]
                self._record(rets.to(self._ret.dtype), lens,
                             {k: v[ends, e] for k, v in
                              episode_info.items()})
                self._ret[col] = float(total[-1] - at[-1])
                self._len[col] = float(len(total) - 1 - int(ends[-1]))
            else:
                self._ret[col] += float(total[-1])
                self._len[col] += len(total)

    def _record(self, rets: torch.Tensor, lens: torch.Tensor,
                episode_info: Dict[str, torch.Tensor]) -> None:
        """Records finished episodes: their returns, lengths and metrics
        (``{name: [episodes]}``, NaN or absent where not reported)."""
        self.recent.extend(zip(rets.tolist(), lens.tolist()))
        row = [rets.sum(), lens.sum(), torch.tensor(float(len(rets)))]
        for name in self.metric_names:
            value = episode_info.get(name)
            value = value if value is not None else torch.full(
                (len(rets), ), float("nan"))
            seen = ~value.isnan()
            row += [value[seen].sum(), seen.sum().float()]
        self.interval += torch.stack(row).double()

    def take_interval(self) -> Dict[str, float]:
        """All ranks' averages since the last call (a collective)."""
        sums = distributed.all_reduce_sum(self.interval.clone())
        self.interval.zero_()
        self.total_episodes += int(sums[2])
        if sums[2] == 0:
            return {}
        out = {"average_return": float(sums[0] / sums[2]),
               "average_episode_length": float(sums[1] / sums[2]),
               "episodes": float(sums[2])}
        for i, name in enumerate(self.metric_names):
            total, count = sums[3 + 2 * i], sums[4 + 2 * i]
            if count > 0:
                out[name] = float(total / count)
        return out

    def recent_return(self) -> float:
        """Mean return of this rank's recent episodes (NaN if none)."""
        if not self.recent:
            return float("nan")
        return sum(r for r, _ in self.recent) / len(self.recent)
