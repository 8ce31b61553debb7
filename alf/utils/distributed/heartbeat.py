"""Signs of life in the rendezvous store, to name a rank that stalled.

Under torchrun the agent sees only exit codes: when a rank stalls (stopped,
stuck holding the GIL, its machine gone), the survivors' collectives time
out and the agent reports a survivor as the first failure. Each rank
therefore bumps a counter in torchrun's store from a daemon thread; a rank
whose collective failed reads the counters twice and names the ranks whose
counters did not move. Counters, not clocks: machines' clocks differ.
"""
import threading
import time
from typing import Callable, List, Optional

import torch.distributed as dist

_KEY = "alf-heartbeat/{}"


class Heartbeat:
    """A daemon thread that bumps this rank's counter every ``interval`` s.

    Args:
        connect: makes a store client of its own (the thread must not share
            the process group's connection).
        rank: this rank.
        world_size: number of ranks.
        interval: seconds between beats.
    """

    def __init__(self, connect: Callable[[], dist.Store], rank: int,
                 world_size: int, interval: float = 1.0):
        self._store = connect()
        self._rank, self._world = rank, world_size
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name="alf-heartbeat")
        self._thread.start()

    def _beat(self) -> None:
        key = _KEY.format(self._rank)
        while not self._stop.is_set():
            try:
                self._store.add(key, 1)
            except RuntimeError:  # the store's host is gone: nothing to do
                return
            self._stop.wait(self._interval)

    def _counts(self) -> List[Optional[int]]:
        counts: List[Optional[int]] = []
        for r in range(self._world):
            try:
                counts.append(self._store.add(_KEY.format(r), 0))
            except RuntimeError:
                counts.append(None)
        return counts

    @property
    def window(self) -> float:
        """Seconds `silent_ranks` watches the counters for."""
        return 3 * self._interval

    def silent_ranks(self) -> List[int]:
        """Other ranks whose counter did not move over `window` seconds
        (stalled, or dead); waits that long."""
        before = self._counts()
        time.sleep(self.window)
        after = self._counts()
        return [r for r in range(self._world) if r != self._rank
                and (after[r] is None or after[r] == before[r])]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._interval)
