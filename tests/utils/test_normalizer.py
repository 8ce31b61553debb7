"""`RunningNormalizer`: statistics, two-phase updates, clipping, state_dict."""
import numpy as np
import torch

from alf.utils.normalizer import RunningNormalizer


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    # Different sizes, means and scales per round so merging is exercised.
    return [rng.normal(loc, scale, size=(n, 3, 2))
            for n, loc, scale in ((5, 1.0, 2.0), (17, -3.0, 0.5),
                                  (1, 10.0, 1.0), (40, 0.0, 5.0))]


def _fed(batches, clip=10.0, per_commit=2):
    norm = RunningNormalizer((3, 2), clip=clip)
    for i, b in enumerate(batches):
        norm.accumulate(torch.from_numpy(b).float())
        if (i + 1) % per_commit == 0:
            norm.commit()
    norm.commit()
    return norm


def test_statistics_equal_numpy_over_all_samples():
    """After several accumulate/commit rounds mean/var equal numpy's."""
    batches = _batches()
    # float32 inputs: compare with numpy on the same float32-rounded data.
    data = np.concatenate(batches).astype(np.float32).astype(np.float64)
    for per_commit in (1, 2, 3):
        norm = _fed(batches, per_commit=per_commit)
        assert norm.mean.dtype == torch.float64
        np.testing.assert_allclose(norm.mean.numpy(), data.mean(0),
                                   rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-9,
                                   atol=1e-10)
        assert float(norm.count) == len(data)


def test_normalize_uses_committed_statistics():
    """normalize == (x - mean) / sqrt(var + eps) with the committed stats."""
    batches = _batches(1)
    data = np.concatenate(batches).astype(np.float32).astype(np.float64)
    norm = _fed(batches, clip=1e9)
    x = torch.from_numpy(_batches(2)[1]).float()
    expected = (x.double().numpy() - data.mean(0)) / np.sqrt(data.var(0) +
                                                            1e-8)
    np.testing.assert_allclose(norm.normalize(x).numpy(), expected,
                               rtol=1e-5, atol=1e-5)
    assert norm.normalize(x).dtype == torch.float32


def test_accumulate_without_commit_changes_nothing():
    """Pending samples do not affect normalize or the statistics."""
    norm = RunningNormalizer((3, 2))
    x = torch.randn(8, 3, 2, generator=torch.Generator().manual_seed(0))
    # Before any commit: identity (mean 0, var 1).
    torch.testing.assert_close(norm.normalize(x), x, rtol=1e-6, atol=1e-6)
    norm.accumulate(x * 7 + 3)
    torch.testing.assert_close(norm.normalize(x), x, rtol=1e-6, atol=1e-6)
    norm.commit()
    before = norm.normalize(x).clone()
    mean, var = norm.mean.clone(), norm.var.clone()
    norm.accumulate(x * 100 - 50)
    norm.accumulate(x * 0.1)
    torch.testing.assert_close(norm.normalize(x), before)
    torch.testing.assert_close(norm.mean, mean)
    torch.testing.assert_close(norm.var, var)
    norm.commit()
    assert not torch.allclose(norm.normalize(x), before)


def test_commit_without_pending_is_noop():
    """An empty commit leaves the statistics as they are."""
    norm = _fed(_batches())
    state = {k: v.clone() for k, v in norm.state_dict().items()}
    norm.commit()
    for k, v in norm.state_dict().items():
        torch.testing.assert_close(v, state[k])


def test_normalize_does_not_modify_input():
    """normalize returns a new tensor; the caller's batch is untouched."""
    norm = _fed(_batches(), clip=0.1)
    x = torch.full((4, 3, 2), 100.0)
    norm.normalize(x)
    assert (x == 100.0).all()


def test_clipping():
    """Normalised values are clipped to [-clip, clip]."""
    norm = RunningNormalizer((2, ), clip=2.0)
    norm.accumulate(torch.tensor([[0.0, 0.0], [2.0, 2.0]]))  # mean 1, var 1
    norm.commit()
    out = norm.normalize(torch.tensor([[100.0, -100.0], [1.5, 0.0],
                                       [3.5, -1.5]]))
    torch.testing.assert_close(out, torch.tensor([[2.0, -2.0], [0.5, -1.0],
                                                  [2.0, -2.0]]),
                               rtol=1e-6, atol=1e-6)


def test_state_dict_round_trip_restores_normalisation():
    """A fresh normaliser loading a state_dict normalises identically."""
    src = _fed(_batches(3))
    src.accumulate(torch.ones(2, 3, 2))  # pending sums travel too
    dst = RunningNormalizer((3, 2))
    x = torch.from_numpy(_batches(4)[3]).float()
    assert not torch.allclose(dst.normalize(x), src.normalize(x))
    dst.load_state_dict(src.state_dict())
    torch.testing.assert_close(dst.normalize(x), src.normalize(x))
    src.commit()
    dst.commit()
    torch.testing.assert_close(dst.mean, src.mean)
    torch.testing.assert_close(dst.var, src.var)
    torch.testing.assert_close(dst.normalize(x), src.normalize(x))


def test_batches_summed_later_count_exactly_once():
    """`accumulate` gathers batches and sums them later (at FOLD_BATCHES,
    or when the sums are read): the sums are those of every batch, taken
    when it was given (the caller may overwrite its tensor), and a
    checkpoint or an acting state taken meanwhile misses none."""
    norm = RunningNormalizer((3, ))
    rng = np.random.default_rng(1)
    data = rng.normal(2.0, 3.0, size=(2 * norm.FOLD_BATCHES + 7, 1, 3))
    reused = torch.zeros(1, 3)
    for row in data:
        reused.copy_(torch.from_numpy(row))
        norm.accumulate(reused)  # the same tensor, overwritten each time
    state = norm.state_dict()
    flat = data.reshape(-1, 3).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(state["pending"][0].numpy(), flat.sum(0),
                               rtol=1e-12)
    np.testing.assert_allclose(state["pending"][1].numpy(),
                               (flat ** 2).sum(0), rtol=1e-12)
    assert state["pending_count"].item() == len(flat)
    # A full state replaces what this copy gathered; what it gathers next
    # adds to the loaded sums.
    other = RunningNormalizer((3, ))
    other.accumulate(torch.ones(4, 3))
    other.load_state_dict(state)
    other.accumulate(torch.ones(2, 3))
    taken = other.take_pending()
    assert taken[-1].item() == len(flat) + 2
    np.testing.assert_allclose(taken[:3].numpy(), flat.sum(0) + 2,
                               rtol=1e-12)
