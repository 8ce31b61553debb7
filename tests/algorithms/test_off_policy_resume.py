"""A resumed off-policy run: its replay buffer starts empty (checkpoints do
not hold it) and it refills it with the restored policy, not at random."""
import gin
import gymnasium as gym
import pytest
import torch

import alf.trainers
from alf.algorithms.dqn_algorithm import DQNAlgorithm
from alf.trainers import Trainer
from alf.trainers.trainer_config import TrainerConfig

OBS = gym.spaces.Box(-1, 1, (3, ))


def _dqn(world_size=1):
    cfg = TrainerConfig(algorithm_ctor=DQNAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4,
                        replay_buffer_capacity=16, initial_collect_steps=8,
                        world_size=world_size)
    alg = DQNAlgorithm(OBS, gym.spaces.Discrete(3), cfg)
    alg.policy_step = lambda observation: "policy"
    return alg


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_resumed_run_acts_with_its_policy_and_waits_to_update(world_size):
    obs = torch.zeros(2, 3)
    fresh = _dqn(world_size)
    assert fresh.rollout_step(obs) != "policy"  # the initial collection
    resumed = _dqn(world_size)
    resumed.on_resume(env_steps=8)
    assert resumed.rollout_step(obs) == "policy"
    assert not resumed.ready()  # its buffer is empty: no updates yet


def test_a_checkpoint_taken_during_the_initial_collection_goes_on_with_it():
    alg = _dqn()
    alg.on_resume(env_steps=4)  # 4 of its 8 random steps were taken
    obs = torch.zeros(2, 3)
    assert alg.rollout_step(obs) != "policy"
    alg._num_stored += 4
    assert alg.rollout_step(obs) == "policy"


def _train(root, steps, *extra):
    """DQN on CartPole: iterations of 256 env steps, updates from 500."""
    alf.trainers.parse_config(["dqn_cart_pole.gin"], [
        f"TrainerConfig.num_env_steps={steps}",
        "TrainerConfig.initial_collect_steps=500",
        "TrainerConfig.num_updates_per_iter=4",
        "TrainerConfig.checkpoint_interval=1",
        "TrainerConfig.eval_interval=0",
        "TrainerConfig.num_eval_episodes=1", *extra])
    try:
        trainer = Trainer(str(root))
        trainer.train()
    finally:
        gin.clear_config()
    return trainer.algorithm


def _local_files(root):
    return sorted(p.name for p in (root / "ckpt").glob("local-*"))


@pytest.mark.timeout(240)
def test_a_resumed_run_goes_on_with_its_replay_buffer(tmp_path):
    first = _train(tmp_path, 512)
    assert int(first.num_updates) == 4  # from the second iteration
    assert _local_files(tmp_path) == ["local-256-rank0.pt",
                                      "local-512-rank0.pt"]
    stored = first.replay_buffer.contents()
    resumed = _train(tmp_path, 768)
    # The 512 transitions it restored and 256 more: it trained at once.
    assert int(resumed.num_updates) == 8
    assert len(resumed.replay) == 768
    got = resumed.replay_buffer.contents()
    for name, t in stored.items():
        if name.startswith("_storage"):
            assert torch.equal(got[name][:len(t)], t), name
    # The newest two: the previous stays for the previous checkpoint.
    assert _local_files(tmp_path) == ["local-512-rank0.pt",
                                      "local-768-rank0.pt"]


@pytest.mark.timeout(240)
def test_without_checkpoint_replay_a_resumed_run_refills_its_buffer(
        tmp_path, monkeypatch):
    acted = []
    monkeypatch.setattr(DQNAlgorithm, "policy_step",
                        lambda self, obs: acted.append(1) or _greedy(obs))
    off = "TrainerConfig.checkpoint_replay=False"
    _train(tmp_path, 512, off)
    assert _local_files(tmp_path) == []
    assert len(acted) == 6  # its last 6 of 256 steps: 500 were random
    acted.clear()
    resumed = _train(tmp_path, 768, off)
    assert len(acted) == 128  # the restored policy refills it, all of it
    assert int(resumed.num_updates) == 4  # none since: 256 < 500 stored


def _greedy(obs):
    from alf.data_structures import AlgStep
    return AlgStep(output=torch.zeros(obs.shape[0], dtype=torch.int64))


@pytest.mark.timeout(240)
def test_a_replay_saved_under_other_sizes_is_ignored_with_a_word(
        tmp_path, caplog):
    _train(tmp_path, 512)
    resumed = _train(tmp_path, 768,
                     "TrainerConfig.replay_buffer_capacity=20000")
    assert len(resumed.replay) == 256  # refilled, not the saved 512
    said = " ".join(r.getMessage() for r in caplog.records)
    assert ("resumed with an empty replay buffer (local-512-rank0.pt does "
            "not fit this config: saved with 50000 steps per environment, "
            "this buffer holds 10000") in said, said


@pytest.mark.timeout(240)
@pytest.mark.parametrize("edit, why", [
    ({"world_size": 2}, "was saved by a run of 2 processes, not 1"),
    ({"world_size": None}, "is not a rank's saved state (it lacks "
     "'world_size' or 'state')")])
def test_a_replay_of_another_run_is_one_line(tmp_path, caplog, edit, why):
    """Before: a warning for the file, then "resumed with an empty replay
    buffer (... unusable (above))"; and a file of another kind was "saved
    by a run of None processes"."""
    _train(tmp_path, 512)
    path = tmp_path / "ckpt" / "local-512-rank0.pt"
    saved = torch.load(path, weights_only=True)
    saved.update(edit)
    torch.save(saved, path)
    caplog.clear()
    resumed = _train(tmp_path, 768)
    assert len(resumed.replay) == 256
    said = [r.getMessage() for r in caplog.records
            if "local-512-rank0.pt" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(
        f"resumed with an empty replay buffer ({path} {why}; it is "
        "ignored): "), said[0]


@pytest.mark.timeout(240)
def test_with_checkpoint_replay_off_a_saved_replay_is_not_restored(
        tmp_path, caplog):
    _train(tmp_path, 512)
    resumed = _train(tmp_path, 768, "TrainerConfig.checkpoint_replay=False")
    assert len(resumed.replay) == 256
    assert ("resumed with an empty replay buffer (TrainerConfig."
            "checkpoint_replay=False)") in caplog.text


@pytest.mark.timeout(240)
def test_a_save_a_killed_run_left_half_written_is_removed(tmp_path):
    _train(tmp_path, 512)
    partial = tmp_path / "ckpt" / "local-768-rank0.pt.tmp"
    partial.write_bytes(b"cut short by a kill")
    _train(tmp_path, 768)
    assert not partial.exists()
