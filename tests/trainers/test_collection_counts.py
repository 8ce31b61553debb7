"""Tests of alf/trainers/collection_counts.py (in one process: the
all-reduce is the identity; tests/bin/test_train_preemption.py runs it
across ranks; `agree_failure` runs in 2 gloo ranks here)."""
import pytest

from alf.trainers.collection_counts import CollectionCounts
from distributed_harness import run_ranks, values


def test_without_preemption_every_iteration_is_full():
    counts = CollectionCounts(32, rank=0, world_size=1, preempting=False)
    assert counts.agree(steps=5, preempted=True) == 32
    assert counts.take_summaries() == {}
    assert counts.preempted_iterations() == [0.0]


def test_with_preemption_the_collected_steps_are_counted_per_rank():
    counts = CollectionCounts(32, rank=0, world_size=1, preempting=True)
    assert counts.agree(steps=20, preempted=True) == 20
    assert counts.agree(steps=32, preempted=False) == 32
    assert counts.take_summaries() == {
        "collect/steps_per_iteration_rank0": 26.0,
        "collect/preempted_fraction_rank0": 0.5}
    assert counts.take_summaries() == {}  # since the last call
    assert counts.agree(steps=10, preempted=True) == 10
    assert counts.preempted_iterations() == [2.0]  # since the start


def test_run_rate_is_smoothed():
    counts = CollectionCounts(32, rank=0, world_size=1, preempting=True)
    assert counts.run_rate(100, 1.0) == pytest.approx(100.0)
    assert counts.run_rate(300, 1.0) == pytest.approx(200.0)
    assert counts.run_rate(0, 0.0) == pytest.approx(100.0)


def test_a_failure_alone_is_its_own_reason():
    counts = CollectionCounts(32, rank=0, world_size=1, preempting=False)
    assert counts.agree_failure(None) is None
    assert counts.agree_failure("actor 0 died") == "actor 0 died"


def _agree_failures(rank, failures):
    counts = CollectionCounts(32, rank, world_size=2, preempting=False)
    return [counts.agree_failure(f[rank]) for f in failures]


@pytest.mark.timeout(90)
def test_every_rank_learns_the_lowest_failing_ranks_reason():
    failures = [(None, None), (None, "rank 1's actor died"),
                ("rank 0's actor died", "rank 1's actor died"),
                ("rank 0's actor died", None)]
    expected = [None, "rank 1's actor died", "rank 0's actor died",
                "rank 0's actor died"]
    assert values(run_ranks(_agree_failures, failures)) == [expected] * 2
