"""Heartbeats name the ranks that stopped beating."""
import torch.distributed as dist

from alf.utils.distributed.heartbeat import Heartbeat


def test_a_rank_that_stops_beating_is_named():
    store = dist.HashStore()
    beats = [Heartbeat(lambda: store, r, 3, interval=0.05) for r in range(3)]
    assert beats[0].silent_ranks() == []
    beats[2].stop()
    assert beats[0].silent_ranks() == [2]
    assert beats[1].silent_ranks() == [2]
    for b in beats[:2]:
        b.stop()
    assert beats[0].silent_ranks() == [1, 2]  # itself is never named
