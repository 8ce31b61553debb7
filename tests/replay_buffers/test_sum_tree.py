"""SumTree: sums, minimum, prefix search and sampling against plain tensors."""
import pytest
import torch

from alf.replay_buffers import SumTree
from stat_checks import chi_square_pvalue


def test_update_keeps_sums_and_min_of_every_item():
    g = torch.Generator().manual_seed(0)
    tree = SumTree(37)  # not a power of two: padding leaves stay empty
    ref = torch.zeros(37, dtype=torch.float64)
    for _ in range(20):
        idx = torch.randint(37, (9, ), generator=g)
        val = torch.rand(9, generator=g, dtype=torch.float64)
        val[0] = 0.0  # a zero priority is allowed and never drawn
        tree.update(idx, val)
        # For a repeated index the last value wins.
        for i, v in zip(idx.tolist(), val.tolist()):
            ref[i] = v
        assert torch.allclose(tree.total(), ref.sum())
        assert torch.equal(tree.get(torch.arange(37)), ref)
        positive = ref[ref > 0]
        assert tree.min() == (positive.min() if len(positive) else
                              float("inf"))


def test_find_follows_prefix_sums_and_skips_empty_items():
    tree = SumTree(8)
    tree.update(torch.tensor([1, 4, 5]), torch.tensor([2.0, 1.0, 3.0]))
    u = torch.tensor([0.0, 1.999, 2.0, 2.999, 3.0, 5.999, 6.0, 1e9])
    # Past the end (rounding) still lands on the last non-empty item.
    assert tree.find(u).tolist() == [1, 1, 4, 4, 5, 5, 5, 5]


def test_sampling_is_proportional_chi_square():
    tree = SumTree(10)
    p = torch.tensor([1.0, 0, 2, 3, 0.5, 0, 4, 1, 1.5, 2])
    tree.update(torch.arange(10), p)
    idx, pri = tree.sample(50_000, torch.Generator().manual_seed(1))
    assert torch.equal(pri, p.double()[idx])
    counts = torch.bincount(idx, minlength=10)
    assert counts[p == 0].sum() == 0
    assert chi_square_pvalue(counts, p) > 1e-3
    # The check itself can fail: uniform draws are far from these p.
    assert chi_square_pvalue(torch.full((10, ), 5000.0) * (p > 0), p) < 1e-6


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_bad_priorities_are_refused(bad):
    tree = SumTree(4)
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.update(torch.tensor([0, 1]), torch.tensor([1.0, bad]))
    assert tree.total() == 0  # nothing half-applied


def test_out_of_range_index_and_empty_tree():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="out of range"):
        tree.update(torch.tensor([4]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="every priority is 0"):
        tree.sample(3)
