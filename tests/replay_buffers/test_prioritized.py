"""PrioritizedReplayBuffer: sampling, weights, priorities, errors; and its
global semantics over 2 real gloo ranks against one buffer holding the
union."""
import pytest
import torch

from alf.replay_buffers import PrioritizedReplayBuffer
from distributed_harness import run_ranks, values
from stat_checks import chi_square_pvalue

ALPHA, BETA = 0.6, 0.4


def _filled(priorities, offset=0, capacity=None, streams=2, seed=0):
    """A buffer whose item k holds the value ``offset + k`` and has
    ``priorities[k]`` (items are numbered t * streams + b)."""
    n = len(priorities)
    rb = PrioritizedReplayBuffer(capacity or n // streams, streams,
                                 alpha=ALPHA, eps=0.0, global_sampling=True,
                                 sampling_seed=seed)
    for t in range(n // streams):
        rb.add_batch(torch.arange(streams, dtype=torch.float32) + offset +
                     t * streams)
    rb.update_priorities(torch.arange(n), torch.as_tensor(priorities))
    return rb


def test_new_items_get_the_largest_priority_so_far():
    rb = PrioritizedReplayBuffer(4, 2, alpha=1.0, eps=0.0)
    rb.add_batch(torch.zeros(2))
    assert rb.sum_tree.get(torch.arange(2)).tolist() == [1.0, 1.0]
    rb.update_priorities(torch.tensor([0, 1]), torch.tensor([3.0, 0.5]))
    rb.add_batch(torch.zeros(2))
    assert rb.sum_tree.get(torch.arange(4)).tolist() == [3.0, 0.5, 3.0, 3.0]


def test_sampling_distribution_and_weights_single_process():
    p = torch.tensor([1.0, 2.0, 0.5, 4.0, 3.0, 1.0])
    rb = _filled(p)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(6)
    for _ in range(2000):
        out = rb.sample(6, beta=BETA, generator=g)
        assert out.loss_scale == 1 / 6
        counts += torch.bincount(out.indices, minlength=6)
        # The value stored at item k is k.
        assert torch.equal(out.batch, out.indices.float())
        pa = p.double()**ALPHA
        expected_w = ((pa[out.indices] / pa.min())**-BETA).float()
        assert torch.allclose(out.weights, expected_w)
    assert chi_square_pvalue(counts, p.double()**ALPHA) > 1e-3


def test_ring_buffer_overwrite_gets_max_priority_and_alpha_zero_is_uniform():
    rb = PrioritizedReplayBuffer(2, 1, alpha=0.0)
    for v in range(5):
        rb.add_batch(torch.tensor([float(v)]))
    rb.update_priorities(torch.tensor([0]), torch.tensor([100.0]))
    assert rb.sum_tree.get(torch.arange(2)).tolist() == [1.0, 1.0]
    seen, g = set(), torch.Generator().manual_seed(0)
    for _ in range(20):
        out = rb.sample(2, generator=g)
        seen |= set(out.batch.tolist())
    assert seen == {3.0, 4.0}
    assert torch.all(out.weights == 1)


@pytest.mark.parametrize("bad", [float("nan"), -0.5])
def test_bad_priorities_are_one_clear_error(bad):
    rb = _filled([1.0, 1.0])
    with pytest.raises(ValueError, match="item 1 is not a finite number"):
        rb.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, bad]))


def test_minibatch_larger_than_contents():
    rb = _filled([1.0, 1.0, 1.0, 1.0], capacity=10)
    with pytest.raises(ValueError, match="minibatch of 5 from 4 stored"):
        rb.sample(5)


# ---- global semantics over 2 ranks -----------------------------------------
RANK_PRIORITIES = [[1.0, 2.0, 0.5, 4.0], [3.0, 1.0, 0.25, 6.0, 2.0, 1.5]]
DRAWS, GLOBAL_BATCH = 1500, 8


def _global_sampling_rank(rank):
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    rb = _filled(RANK_PRIORITIES[rank], offset=100 * rank, seed=123)
    g = torch.Generator().manual_seed(1000 + rank)
    counts = torch.zeros(len(RANK_PRIORITIES[rank]))
    sizes, weights = [], {}
    for _ in range(DRAWS):
        out = rb.sample(GLOBAL_BATCH, beta=BETA, generator=g)
        sizes.append(len(out.indices))
        counts += torch.bincount(out.indices, minlength=len(counts))
        for v, w in zip(out.batch.tolist(), out.weights.tolist()):
            weights[v] = w
    # One update with a DDP'd linear model: loss_scale * sum(w * l).
    model = nn.Linear(1, 1)
    ddp = DDP(model)
    out = rb.sample(GLOBAL_BATCH, beta=BETA, generator=g)
    x = out.batch.reshape(-1, 1) / 100
    loss = out.loss_scale * (out.weights * (ddp(x).squeeze(1) - 1)**2).sum()
    loss.backward()
    gathered = [None, None]
    dist.all_gather_object(gathered, (out.batch, out.weights))
    return (counts, sizes, weights, [p.grad.clone() for p in model.parameters()],
            gathered, {k: v.clone() for k, v in model.state_dict().items()})


@pytest.mark.timeout(120)
def test_global_sampling_matches_one_buffer_holding_the_union():
    results = values(run_ranks(_global_sampling_rank, timeout=100))
    # Every global minibatch has exactly GLOBAL_BATCH items over the ranks,
    # split differently from draw to draw.
    per_draw = [a + b for a, b in zip(results[0][1], results[1][1])]
    assert per_draw == [GLOBAL_BATCH] * DRAWS
    assert len(set(results[0][1])) > 3
    # The union's draw frequencies follow p^alpha over all 10 items.
    counts = torch.cat([results[0][0], results[1][0]])
    union_p = torch.tensor(sum(RANK_PRIORITIES, [])).double()
    assert chi_square_pvalue(counts, union_p**ALPHA) > 1e-3
    # ... and match one buffer holding the union, sampled the same way.
    union = _filled(union_p.tolist(), seed=7)
    one = torch.zeros(10)
    g = torch.Generator().manual_seed(5)
    one_weights = {}
    for _ in range(DRAWS):
        out = union.sample(GLOBAL_BATCH, beta=BETA, generator=g)
        one += torch.bincount(out.indices, minlength=10)
        for i, w in zip(out.indices.tolist(), out.weights.tolist()):
            one_weights[i] = w
    table = torch.stack([counts, one])
    expected = table.sum(1, keepdim=True) * table.sum(0) / table.sum()
    # A 2x10 contingency test: both samples come from one distribution.
    stat = ((table - expected)**2 / expected).sum()
    p_value = float(torch.special.gammaincc(torch.tensor(4.5), stat / 2))
    assert p_value > 1e-3
    # Importance weights equal the single buffer's, item by item (global
    # item k of rank r has value 100 r + k; in the union it is item
    # 4 r + k).
    for rank, (_, _, weights, *_rest) in enumerate(results):
        for value, w in weights.items():
            item = int(value) - 100 * rank + 4 * rank
            assert w == pytest.approx(one_weights[item], rel=1e-6)
    # The DDP gradient equals the gradient of mean(w * l) over the union
    # minibatch in one process.
    batch = torch.cat([results[0][4][0][0], results[0][4][1][0]])
    weights = torch.cat([results[0][4][0][1], results[0][4][1][1]])
    assert len(batch) == GLOBAL_BATCH
    model = torch.nn.Linear(1, 1)
    model.load_state_dict(results[0][5])
    loss = (weights * (model(batch.reshape(-1, 1) / 100).squeeze(1) -
                       1)**2).mean()
    loss.backward()
    for rank in range(2):
        for mine, ref in zip(results[rank][3], model.parameters()):
            assert torch.allclose(mine, ref.grad, atol=1e-6), (mine, ref.grad)


@pytest.mark.parametrize("kw,match", [
    (dict(alpha=-1.0), r"^PrioritizedReplayBuffer\.alpha=-1\.0; valid"),
    (dict(eps=-1e-6), r"^PrioritizedReplayBuffer\.eps=-1e-06; valid"),
])
def test_bad_options_of_the_buffer_are_config_errors(kw, match):
    from alf.utils.errors import ConfigError
    with pytest.raises(ConfigError, match=match):
        PrioritizedReplayBuffer(2, 2, **kw)
