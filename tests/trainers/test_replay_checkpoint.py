"""Each rank's replay buffer beside a checkpoint: saved and restored on
2 real gloo ranks, all or none, with the prioritized sum tree; a buffer's
contents round trip and refuse other sizes."""
import os

import pytest
import torch

from alf.replay_buffers import PrioritizedReplay, UniformReplay
from distributed_harness import run_ranks, values


def _sac(rank, world):
    import gymnasium as gym

    from alf import replay_buffers
    from alf.algorithms.sac_algorithm import SACAlgorithm
    from alf.trainers.trainer_config import TrainerConfig

    cfg = TrainerConfig(algorithm_ctor=SACAlgorithm, num_envs=4,
                        unroll_length=2, minibatch_size=8,
                        initial_collect_steps=4, replay_buffer_capacity=32,
                        num_updates_per_iter=1).per_rank(world)
    torch.manual_seed(0)
    return SACAlgorithm(gym.spaces.Box(-1, 1, (3, )),
                        gym.spaces.Box(-1, 1, (1, )), cfg,
                        replay=replay_buffers.PrioritizedGlobalReplay())


def _fill(alg, steps):
    from alf.data_structures import Experience
    for _ in range(steps):
        obs = torch.randn(2, 3)
        with torch.inference_mode():
            action = alg.rollout_step(obs).output
        alg.store(Experience(obs, action, obs.sum(1),
                             torch.zeros(2, dtype=bool),
                             torch.zeros(2, dtype=bool), torch.randn(2, 3),
                             policy_version=torch.zeros(2, dtype=torch.int64)
                             ))


def _save_then_restore(rank, root, drop_rank1):
    from alf.trainers.episode_stats import EpisodeStats
    from alf.trainers.run_state import RunState
    from alf.utils import distributed

    alg = _sac(rank, 2)
    distributed.activate_ddp(alg)
    torch.manual_seed(100 + rank)  # each rank's own experience
    _fill(alg, 20)  # wraps the ring of 8 steps (16 per rank)
    alg.train_iter(0.5)  # priorities in the sum tree
    RunState(root, alg, EpisodeStats(2), rank == 0).save(3, 80)
    saved = {k: v.clone() for k, v in alg.replay_buffer.contents().items()}
    if drop_rank1 and rank == 1:
        os.remove(os.path.join(root, "ckpt", "local-80-rank1.pt"))
    torch.distributed.barrier()
    fresh = _sac(rank, 2)
    distributed.activate_ddp(fresh)
    resumed = RunState(root, fresh, EpisodeStats(2), rank == 0).restore()
    return (saved, fresh.replay_buffer.contents(), len(fresh.replay),
            resumed.local_note)


@pytest.mark.timeout(120)
def test_each_rank_restores_its_own_replay(tmp_path):
    results = values(run_ranks(_save_then_restore, str(tmp_path), False,
                               timeout=100))
    for saved, got, stored, note in results:
        assert stored == 16 and set(saved) == set(got) and note == ""
        for name, t in saved.items():
            assert torch.equal(got[name], t), name
    assert not torch.equal(results[0][1]["_storage_0"],
                           results[1][1]["_storage_0"])


@pytest.mark.timeout(120)
def test_a_rank_without_its_file_means_no_rank_restores(tmp_path):
    results = values(run_ranks(_save_then_restore, str(tmp_path), True,
                               timeout=100))
    assert [stored for _, _, stored, _ in results] == [0, 0]
    assert [note for *_, note in results] == [
        "another process has none; all restore theirs or none",
        "no local-80-rank1.pt beside the checkpoint"]


@pytest.mark.parametrize("replay", [UniformReplay, PrioritizedReplay])
@pytest.mark.parametrize("steps", [3, 7])  # partly filled, wrapped
def test_contents_round_trip(replay, steps):
    buffer = replay().build(5, 2)
    for t in range(steps):
        buffer.add_batch({"x": torch.full((2, 3), float(t))})
    other = replay().build(5, 2)
    other.load_contents(buffer.contents(), {"x": torch.zeros(2, 3)})
    assert other.num_added == steps and len(other) == len(buffer)
    assert torch.equal(other.gather_all()["x"], buffer.gather_all()["x"])
    other.add_batch({"x": torch.full((2, 3), 9.0)})  # goes on as one
    buffer.add_batch({"x": torch.full((2, 3), 9.0)})
    assert torch.equal(other.gather_all()["x"], buffer.gather_all()["x"])


def test_contents_of_other_sizes_are_refused_leaving_it_empty():
    buffer = UniformReplay().build(5, 2)
    buffer.add_batch({"x": torch.zeros(2, 3)})
    for capacity, example in ((6, {"x": torch.zeros(2, 3)}),
                              (5, {"x": torch.zeros(2, 4)})):
        other = UniformReplay().build(capacity, 2)
        with pytest.raises(ValueError, match="do not fit|holds 6"):
            other.load_contents(buffer.contents(), example)
        assert other.contents() == {}  # its storage is made on first add
        other.add_batch({"x": torch.zeros(2, 7)})


@pytest.mark.parametrize("saved, resumed", [
    (PrioritizedReplay, UniformReplay), (UniformReplay, PrioritizedReplay)])
def test_contents_of_another_kind_of_replay_say_so(saved, resumed):
    """Before: "stored contents do not fit this buffer (_max_priority:
    capacity 5 x 2 streams)", which named neither kind."""
    buffer = saved().build(5, 2)
    buffer.add_batch({"x": torch.zeros(2, 3)})
    other = resumed().build(5, 2)
    with pytest.raises(ValueError, match=r"^saved by another kind of replay "
                       r"buffer \(uniform against prioritized replay\?\): "
                       r"it has .*, lacks "):
        other.load_contents(buffer.contents(), {"x": torch.zeros(2, 3)})
    assert other.contents() == {}


def test_only_what_was_filled_is_saved(tmp_path):
    buffer = UniformReplay().build(1000, 2)
    buffer.add_batch({"x": torch.zeros(2, 100)})
    torch.save(buffer.contents(), tmp_path / "c.pt")
    assert os.path.getsize(tmp_path / "c.pt") < 20_000  # not 800 kB


def test_a_full_buffer_is_saved_without_a_copy():
    """Copying a full buffer to save it would double its memory."""
    buffer = UniformReplay().build(4, 2)
    for t in range(5):  # full, wrapped
        buffer.add_batch({"x": torch.full((2, 3), float(t))})
    stored = dict(buffer.named_buffers())
    contents = buffer.contents()
    shared = [name for name, t in contents.items()
              if name in stored and t.data_ptr() == stored[name].data_ptr()
              and t.numel() == stored[name].numel() > 1]
    assert shared, "the full storage was copied"
    other = UniformReplay().build(4, 2)
    other.load_contents(contents, {"x": torch.zeros(2, 3)})
    assert torch.equal(other.gather_all()["x"], buffer.gather_all()["x"])
