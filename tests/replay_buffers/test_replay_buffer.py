"""`ReplayBuffer` (ring storage in registered buffers) and
`iterate_minibatches`."""
from typing import NamedTuple

import pytest
import torch

from alf.replay_buffers.replay_buffer import ReplayBuffer, iterate_minibatches

B = 3


class Item(NamedTuple):
    obs: torch.Tensor
    extra: dict


def _item(step: int, batch_size: int = B) -> Item:
    """Time step ``step``: every leaf encodes (step, env) so rows are known."""
    env = torch.arange(batch_size)
    code = step * 10 + env  # [B]
    return Item(obs=code.float()[:, None].expand(batch_size, 2).clone(),
                extra={"action": code.long(),
                       "flag": (code % 2 == 0),
                       "vec": code.double()[:, None, None].repeat(1, 2, 3)})


def _codes(item: Item) -> torch.Tensor:
    return item.extra["action"]


def test_add_and_gather_all_oldest_first():
    """gather_all returns [num_steps, B, ...] in insertion order."""
    rb = ReplayBuffer(capacity=5, batch_size=B)
    assert len(rb) == 0 and rb.num_steps == 0
    for s in range(3):
        rb.add_batch(_item(s))
    assert rb.num_steps == 3 and len(rb) == 3 * B
    out = rb.gather_all()
    assert isinstance(out, Item) and set(out.extra) == {"action", "flag",
                                                        "vec"}
    expected = torch.stack([_codes(_item(s)) for s in range(3)])
    torch.testing.assert_close(out.extra["action"], expected)
    assert out.obs.shape == (3, B, 2) and out.obs.dtype == torch.float32
    assert out.extra["flag"].dtype == torch.bool
    assert out.extra["vec"].shape == (3, B, 2, 3)
    assert out.extra["vec"].dtype == torch.float64
    torch.testing.assert_close(out.obs[..., 0], expected.float())
    torch.testing.assert_close(out.extra["vec"][:, :, 1, 2], expected.double())
    torch.testing.assert_close(out.extra["flag"], expected % 2 == 0)


@pytest.mark.parametrize("num_added", [5, 6, 8, 10, 13])
def test_gather_all_after_wrap_around(num_added):
    """After the ring wraps, the newest ``capacity`` steps come oldest first."""
    cap = 5
    rb = ReplayBuffer(capacity=cap, batch_size=B)
    for s in range(num_added):
        rb.add_batch(_item(s))
    assert rb.num_steps == cap and len(rb) == cap * B
    out = rb.gather_all()
    expected = torch.stack(
        [_codes(_item(s)) for s in range(num_added - cap, num_added)])
    torch.testing.assert_close(out.extra["action"], expected)
    torch.testing.assert_close(out.obs[..., 1], expected.float())


def test_clear_forgets_contents():
    """clear empties the buffer; later adds start again at the oldest row."""
    rb = ReplayBuffer(capacity=4, batch_size=B)
    for s in range(6):
        rb.add_batch(_item(s))
    rb.clear()
    assert len(rb) == 0 and rb.num_steps == 0
    with pytest.raises(ValueError, match="holds 0 transitions"):
        rb.gather_all()
    with pytest.raises(ValueError):
        rb.get_batch(2)
    for s in (100, 101):
        rb.add_batch(_item(s))
    out = rb.gather_all()
    torch.testing.assert_close(
        out.extra["action"], torch.stack([_codes(_item(100)),
                                          _codes(_item(101))]))


def test_plain_tensor_and_dict_contents():
    """A bare tensor and a dict nest are stored and returned as such."""
    rb = ReplayBuffer(capacity=2, batch_size=2)
    rb.add_batch(torch.tensor([1, 2]))
    rb.add_batch(torch.tensor([3, 4]))
    torch.testing.assert_close(rb.gather_all(), torch.tensor([[1, 2], [3,
                                                                       4]]))
    rb2 = ReplayBuffer(capacity=2, batch_size=2)
    rb2.add_batch({"b": torch.zeros(2), "a": {"x": torch.ones(2, 4)}})
    out = rb2.gather_all()
    assert set(out) == {"a", "b"} and set(out["a"]) == {"x"}
    assert out["a"]["x"].shape == (1, 2, 4) and (out["a"]["x"] == 1).all()
    assert out["b"].shape == (1, 2) and (out["b"] == 0).all()


def test_add_batch_copies_the_data():
    """Changing a tensor after add_batch does not change the stored row."""
    rb = ReplayBuffer(capacity=2, batch_size=2)
    x = torch.tensor([1.0, 2.0])
    rb.add_batch(x)
    x.fill_(0.0)
    torch.testing.assert_close(rb.gather_all(), torch.tensor([[1.0, 2.0]]))


def test_get_batch_returns_stored_rows():
    """Sampled rows are stored (step, env) rows with shapes [batch_size, ...]."""
    rb = ReplayBuffer(capacity=4, batch_size=B)
    for s in range(6):  # wrapped: steps 2..5 stored
        rb.add_batch(_item(s))
    stored = {int(c) for s in range(2, 6) for c in _codes(_item(s))}
    g = torch.Generator().manual_seed(0)
    batch = rb.get_batch(200, generator=g)
    assert batch.obs.shape == (200, 2)
    assert batch.extra["action"].shape == (200, )
    assert batch.extra["vec"].shape == (200, 2, 3)
    assert batch.extra["flag"].shape == (200, )
    codes = batch.extra["action"]
    assert set(codes.tolist()) <= stored
    # With 200 draws from 12 rows every row shows up (P(miss) < 1e-6).
    assert set(codes.tolist()) == stored
    # All leaves of one sample come from the same row.
    torch.testing.assert_close(batch.obs[:, 0], codes.float())
    torch.testing.assert_close(batch.extra["vec"][:, 1, 1], codes.double())
    torch.testing.assert_close(batch.extra["flag"], codes % 2 == 0)
    # Same generator seed -> same sample.
    again = rb.get_batch(200, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(again.extra["action"], codes)


def test_get_batch_before_full_only_uses_filled_rows():
    """A partly filled buffer never samples the unwritten (zero) storage."""
    rb = ReplayBuffer(capacity=10, batch_size=B)
    for s in range(1, 3):
        rb.add_batch(_item(s))
    codes = rb.get_batch(300, generator=torch.Generator().manual_seed(1))
    assert set(codes.extra["action"].tolist()) == {10, 11, 12, 20, 21, 22}


def test_bad_first_dim_raises():
    """A leaf whose first dim is not batch_size raises ValueError."""
    rb = ReplayBuffer(capacity=2, batch_size=B)
    with pytest.raises(ValueError, match="batch_size=3"):
        rb.add_batch({"ok": torch.zeros(B), "bad": torch.zeros(B + 1, 2)})
    with pytest.raises(ValueError, match="batch_size=3"):
        ReplayBuffer(capacity=2, batch_size=B).add_batch(torch.tensor(1.0))


def test_non_positive_sizes_raise():
    """capacity and batch_size must be positive."""
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0, batch_size=1)
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=1, batch_size=0)


def test_storage_is_registered_buffers_not_in_state_dict():
    """Storage tensors are module buffers but not checkpointed by default."""
    rb = ReplayBuffer(capacity=3, batch_size=B)
    rb.add_batch(_item(0))
    names = {n for n, _ in rb.named_buffers()}
    storage = {n for n in names if n.startswith("_storage_")}
    assert len(storage) == 4  # obs, action, flag, vec
    assert "_num_added" in names
    assert rb.state_dict() == {}
    assert list(rb.parameters()) == []
    # The storage follows the module (a real buffer, e.g. for .to()).
    rb.double()
    assert rb.gather_all().obs.dtype == torch.float64


def test_include_in_checkpoint_round_trip():
    """With include_in_checkpoint, contents and counter survive a load."""
    src = ReplayBuffer(capacity=4, batch_size=B, include_in_checkpoint=True)
    for s in range(6):  # wrapped
        src.add_batch(_item(s))
    sd = src.state_dict()
    assert "_num_added" in sd and int(sd["_num_added"]) == 6
    assert sum(k.startswith("_storage_") for k in sd) == 4

    dst = ReplayBuffer(capacity=4, batch_size=B, include_in_checkpoint=True)
    dst.add_batch(_item(50))  # builds storage of the same shapes
    dst.load_state_dict(sd)
    assert dst.num_steps == 4 and len(dst) == 4 * B
    torch.testing.assert_close(dst.gather_all().extra["action"],
                               src.gather_all().extra["action"])
    # The counter is live: the next add overwrites the oldest (step 2) row.
    src.add_batch(_item(6))
    dst.add_batch(_item(6))
    torch.testing.assert_close(dst.gather_all().extra["action"],
                               src.gather_all().extra["action"])
    assert dst.gather_all().extra["action"][0, 0] == 30


# ---- iterate_minibatches ---------------------------------------------------


def _flat_batch(n):
    return {"i": torch.arange(n), "x": torch.arange(n).float()[:, None] * 2}


def test_minibatches_cover_every_row_once():
    """One call yields a permutation of all rows, in consistent leaves."""
    batch = _flat_batch(23)
    seen = []
    sizes = []
    for mb in iterate_minibatches(batch, 5):
        torch.testing.assert_close(mb["x"][:, 0], mb["i"].float() * 2)
        seen += mb["i"].tolist()
        sizes.append(len(mb["i"]))
    assert sorted(seen) == list(range(23))
    assert sizes == [5, 5, 5, 5, 3]


def test_minibatches_exact_division_and_one_big_batch():
    """minibatch_size dividing N gives equal batches; >= N gives one."""
    batch = _flat_batch(12)
    assert [len(mb["i"]) for mb in iterate_minibatches(batch, 4)] == [4, 4, 4]
    mbs = list(iterate_minibatches(batch, 100))
    assert len(mbs) == 1 and sorted(mbs[0]["i"].tolist()) == list(range(12))


def test_minibatches_nested_namedtuple():
    """Namedtuple batches come back as the same namedtuple type."""
    n = 7
    batch = Item(obs=torch.arange(n).float()[:, None],
                 extra={"action": torch.arange(n)})
    mbs = list(iterate_minibatches(batch, 3))
    assert all(isinstance(mb, Item) for mb in mbs)
    assert sorted(i for mb in mbs for i in mb.extra["action"].tolist()) == \
        list(range(n))


def test_minibatch_order_is_reproducible_with_seeded_generator():
    """Same generator seed -> same order; different seeds -> different."""
    batch = _flat_batch(50)

    def order(seed):
        g = torch.Generator().manual_seed(seed)
        return [mb["i"].tolist() for mb in iterate_minibatches(batch, 8, g)]

    assert order(3) == order(3)
    assert order(3) != order(4)
    assert sorted(sum(order(3), [])) == list(range(50))
    # Not the identity order (it shuffles).
    assert sum(order(3), []) != list(range(50))


# ---- known bugs (see the report) -------------------------------------------


def test_rejected_first_add_leaves_buffer_usable():
    """After a rejected first add_batch, a valid add stores every leaf."""
    rb = ReplayBuffer(capacity=2, batch_size=B)
    with pytest.raises(ValueError):
        rb.add_batch({"a": torch.zeros(B), "b": torch.zeros(B + 1)})
    rb.add_batch({"a": torch.ones(B), "b": torch.full((B, ), 2.0)})
    out = rb.gather_all()
    torch.testing.assert_close(out["a"], torch.ones(1, B))
    torch.testing.assert_close(out["b"], torch.full((1, B), 2.0))


def test_add_batch_with_different_structure_raises():
    """A nest of another structure than the first one is rejected."""
    rb = ReplayBuffer(capacity=2, batch_size=B)
    rb.add_batch({"a": torch.zeros(B), "b": torch.zeros(B)})
    with pytest.raises(ValueError):
        rb.add_batch({"a": torch.ones(B)})


def test_storage_made_under_inference_mode_can_be_trained_on():
    """A buffer first filled during an inference-mode rollout yields normal
    tensors that autograd can use."""
    rb = ReplayBuffer(capacity=2, batch_size=3)
    with torch.inference_mode():
        rb.add_batch(torch.ones(3, 4))
        rb.add_batch(torch.ones(3, 4))
    x = rb.gather_all()
    assert not x.is_inference()
    w = torch.ones(4, requires_grad=True)
    (x.flatten(0, 1) @ w).sum().backward()
    assert torch.equal(w.grad, torch.full((4, ), 6.0))


def test_storage_follows_the_module_device():
    # A module moved (e.g. to a GPU) before its first add gets its storage
    # there; "meta" stands in for a GPU on a CPU-only machine.
    rb = ReplayBuffer(capacity=4, batch_size=2).to("meta")
    rb.add_batch(torch.zeros(2, 3))
    assert rb._storage()[0].device.type == "meta"
    explicit = ReplayBuffer(capacity=4, batch_size=2, device="cpu").to("meta")
    explicit.add_batch(torch.zeros(2, 3))
    assert explicit._storage()[0].device.type == "cpu"


def test_storage_bytes_is_what_the_first_add_allocates():
    rb = ReplayBuffer(capacity=5, batch_size=B)
    expected = rb.storage_bytes(_item(0))
    rb.add_batch(_item(0))
    assert expected == sum(s.numel() * s.element_size()
                           for s in rb._storage())
    # obs float32 [3, 2], action int64, flag bool, vec float64 [3, 2, 3]
    assert expected == 5 * B * (2 * 4 + 8 + 1 + 6 * 8)


def test_storage_larger_than_memory_is_refused_before_allocating(
        monkeypatch):
    import alf.utils.memory as memory
    from alf.utils.errors import ConfigError
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    rb = ReplayBuffer(capacity=100, batch_size=B)
    with pytest.raises(ConfigError) as info:
        rb.add_batch(_item(0))
    msg = str(info.value)
    assert "a replay buffer of 100 steps x 3 streams needs 19500 bytes" in msg
    assert "but 1000 bytes" in msg and "\n" not in msg
    assert list(rb.buffers()) == [rb._num_added]  # nothing allocated
