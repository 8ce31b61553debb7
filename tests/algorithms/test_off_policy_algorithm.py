"""`OffPolicyAlgorithm`'s replay memory check: the storage's size is known
from the spaces before anything is stored, and a capacity larger than memory
is refused then (issue 11)."""
import gymnasium as gym
import pytest

from alf.algorithms import DQNAlgorithm, SACAlgorithm
from alf.replay_buffers import PrioritizedReplay, UniformReplay
from alf.trainers import Trainer, TrainerConfig
from alf.utils import memory
from alf.utils.errors import ConfigError

BOX = gym.spaces.Box(-1, 1, (3, ))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctor,env_name", [(SACAlgorithm, "Pendulum-v1"),
                                           (DQNAlgorithm, "CartPole-v1")])
def test_size_from_spaces_is_what_storing_allocates(tmp_path, ctor, env_name):
    cfg = TrainerConfig(algorithm_ctor=ctor, env_name=env_name, num_envs=2,
                        unroll_length=1, num_env_steps=4,
                        initial_collect_steps=2, minibatch_size=2,
                        replay_buffer_capacity=8, num_eval_episodes=1,
                        num_updates_per_iter=1)
    trainer = Trainer(str(tmp_path), cfg)
    trainer.train()
    rb = trainer.algorithm.replay_buffer
    stored = sum(s.numel() * s.element_size() for s in rb._storage())
    example = trainer.algorithm.example_experience(cfg.num_envs)
    assert rb.storage_bytes(example) == stored


def _sac(capacity, **kw):
    cfg = TrainerConfig(algorithm_ctor=SACAlgorithm, num_envs=2,
                        unroll_length=1, minibatch_size=4,
                        replay_buffer_capacity=capacity)
    return SACAlgorithm(BOX, gym.spaces.Box(-2, 2, (1, )), cfg, **kw)


def test_capacity_beyond_any_memory_is_refused_at_construction():
    with pytest.raises(ConfigError) as info:
        _sac(10**12)
    msg = str(info.value).splitlines()[0]  # gin's context follows
    assert "TrainerConfig.replay_buffer_capacity=1000000000000" in msg, msg
    # obs 2 x 3 float32, action float32, reward, 2 flags, version int64
    assert "(42 bytes per transition) needs 42000000000000 bytes" in msg
    assert "are available on cpu" in msg and "transitions fit" in msg


@pytest.mark.parametrize("replay,needed", [(UniformReplay, 42 * 1000),
                                           (PrioritizedReplay, 42 * 1000 +
                                            32 * 1024)])
def test_processes_on_the_machine_and_sum_tree_count(monkeypatch, replay,
                                                     needed):
    monkeypatch.setattr(memory, "available_bytes", lambda device: needed)
    _sac(1000, replay=replay())  # fits exactly
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="2 processes on this machine"):
        _sac(1000, replay=replay())
