"""DQN: the loss against a hand computation, targets, exploration, errors."""
import gymnasium as gym
import pytest
import torch
import torch.nn.functional as F

from alf.algorithms.dqn_algorithm import DQNAlgorithm
from alf.data_structures import Experience
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.errors import ConfigError

OBS = gym.spaces.Box(-1, 1, (3, ))


def _config(**kw):
    kw = dict(dict(algorithm_ctor=DQNAlgorithm, num_envs=2, unroll_length=4,
                   minibatch_size=4, replay_buffer_capacity=16), **kw)
    return TrainerConfig(**kw)


def _dqn(**kw):
    torch.manual_seed(0)
    return DQNAlgorithm(OBS, gym.spaces.Discrete(3), _config(), **kw)


def _batch():
    g = torch.Generator().manual_seed(1)
    return Experience(observation=torch.randn(4, 3, generator=g),
                      action=torch.tensor([0, 2, 1, 2]),
                      reward=torch.tensor([1.0, -0.5, 0.0, 2.0]),
                      terminated=torch.tensor([False, True, False, False]),
                      truncated=torch.tensor([False, False, True, False]),
                      next_observation=torch.randn(4, 3, generator=g))


@pytest.mark.parametrize("double", [True, False])
def test_loss_matches_hand_computation(double):
    alg = _dqn(gamma=0.9, double_dqn=double)
    # Make the target network differ from the online one.
    with torch.no_grad():
        for p in alg.target_q_net.parameters():
            p.add_(0.1)
    b = _batch()
    weights = torch.tensor([1.0, 0.5, 2.0, 1.0])
    out = alg.minibatch_loss(b, weights, 0.25)
    q = alg.q_net(b.observation)[torch.arange(4), b.action]
    tq = alg.target_q_net(b.next_observation)
    if double:
        nxt = tq[torch.arange(4), alg.q_net(b.next_observation).argmax(1)]
    else:
        nxt = tq.max(1).values
    # Termination cuts the bootstrap; truncation does not.
    target = b.reward + 0.9 * nxt * torch.tensor([1.0, 0.0, 1.0, 1.0])
    expected = 0.25 * (weights * F.smooth_l1_loss(q, target,
                                                  reduction="none")).sum()
    assert torch.allclose(out.loss, expected)
    assert torch.allclose(out.priority, (q - target).abs())
    out.loss.backward()
    assert all(p.grad is None for p in alg.target_q_net.parameters())


def test_target_network_copies_every_period():
    alg = _dqn(target_update_period=3)
    with torch.no_grad():
        for p in alg.q_net.parameters():
            p.add_(1.0)
    differs = lambda: any(not torch.equal(a, b) for a, b in zip(  # noqa: E731
        alg.q_net.parameters(), alg.target_q_net.parameters()))
    alg.after_update()
    alg.after_update()
    assert differs()
    alg.after_update()
    assert not differs()
    assert int(alg.num_updates) == 3


def test_epsilon_schedule_and_random_initial_collection():
    alg = _dqn(epsilon_start=1.0, epsilon_final=0.1, exploration_fraction=0.5)
    assert alg.epsilon() == 1.0
    alg._progress = 0.25
    assert alg.epsilon() == pytest.approx(0.55)
    alg._progress = 0.9
    assert alg.epsilon() == pytest.approx(0.1)
    # Before training starts the buffer is empty: uniformly random actions.
    alg = DQNAlgorithm(OBS, gym.spaces.Discrete(3),
                       _config(initial_collect_steps=4))
    acts = torch.cat([alg.rollout_step(torch.zeros(2, 3)).output
                      for _ in range(300)])
    assert set(acts.tolist()) == {0, 1, 2}
    assert not alg.ready()


def test_continuous_actions_are_refused():
    with pytest.raises(ConfigError, match="needs a Discrete action space"):
        DQNAlgorithm(OBS, gym.spaces.Box(-1, 1, (1, )), _config())


def test_capacity_smaller_than_one_unroll_is_refused():
    with pytest.raises(ConfigError, match="less than one unroll"):
        DQNAlgorithm(OBS, gym.spaces.Discrete(3),
                     _config(replay_buffer_capacity=6))


@pytest.mark.parametrize("name", ["minibatch_size", "initial_collect_steps"])
def test_minibatch_or_initial_collection_larger_than_buffer(name):
    with pytest.raises(ConfigError, match=f"{name}=40 .* holds \\(16"):
        DQNAlgorithm(OBS, gym.spaces.Discrete(3), _config(**{name: 40}))
