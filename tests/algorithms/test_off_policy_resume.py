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


@pytest.mark.timeout(240)
def test_the_trainer_tells_a_resumed_algorithm_where_it_resumed(
        tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(DQNAlgorithm, "on_resume",
                        lambda self, env_steps: seen.append(env_steps))

    def train(steps):
        alf.trainers.parse_config(["dqn_cart_pole.gin"], [
            f"TrainerConfig.num_env_steps={steps}",
            "TrainerConfig.initial_collect_steps=64",
            "TrainerConfig.checkpoint_interval=1",
            "TrainerConfig.eval_interval=0",
            "TrainerConfig.num_eval_episodes=1"])
        try:
            Trainer(str(tmp_path)).train()
        finally:
            gin.clear_config()

    train(256)
    assert seen == []  # a fresh start
    train(512)
    assert seen == [256]
