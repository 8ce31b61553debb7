"""Heartbeats name the ranks that stopped beating."""
import concurrent.futures

import torch.distributed as dist

from alf.utils.distributed.heartbeat import Heartbeat


def test_a_rank_that_stops_beating_is_named():
    # A live rank is named silent only if its beat thread misses a whole
    # window (3 intervals): at 0.25 s, a thread held off the CPU for over
    # 0.5 s (at 0.05 s, 0.1 s sufficed on a loaded machine).
    store = dist.HashStore()
    beats = [Heartbeat(lambda: store, r, 3, interval=0.25) for r in range(3)]
    assert beats[0].silent_ranks() == []
    beats[2].stop()
    # Both live ranks watch the same window, at once.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        seen = list(pool.map(lambda b: b.silent_ranks(), beats[:2]))
    assert seen == [[2], [2]]
    for b in beats[:2]:
        b.stop()
    assert beats[0].silent_ranks() == [1, 2]  # itself is never named
