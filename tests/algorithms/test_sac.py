"""SAC: the squashed Gaussian, which loss trains what, targets, learning."""

import gymnasium as gym
import pytest
import torch

from alf.algorithms.sac_algorithm import SACAlgorithm, SquashedGaussianActor
from alf.data_structures import Experience
from alf.trainers import Trainer
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.errors import ConfigError

OBS = gym.spaces.Box(-1, 1, (3, ))
ACT = gym.spaces.Box(-2, 2, (2, ))


def _sac(**kw):
    torch.manual_seed(0)
    cfg = TrainerConfig(algorithm_ctor=SACAlgorithm, num_envs=2,
                        unroll_length=1, minibatch_size=4,
                        replay_buffer_capacity=16)
    return SACAlgorithm(OBS, ACT, cfg, **kw)


def _batch():
    g = torch.Generator().manual_seed(1)
    return Experience(observation=torch.randn(4, 3, generator=g),
                      action=torch.rand(4, 2, generator=g) * 4 - 2,
                      reward=torch.randn(4, generator=g),
                      terminated=torch.tensor([False, True, False, False]),
                      truncated=torch.zeros(4, dtype=torch.bool),
                      next_observation=torch.randn(4, 3, generator=g))


def test_squashed_log_prob_matches_torch_distributions():
    from torch.distributions import Normal, TransformedDistribution
    from torch.distributions.transforms import TanhTransform
    actor = SquashedGaussianActor(OBS, ACT, hidden_sizes=(8, ))
    with torch.no_grad():
        actor.head.weight.normal_()  # a spread of means and stds
    obs = torch.randn(64, 3)
    torch.manual_seed(3)
    action, log_prob = actor.sample(obs)
    mean, log_std = actor(obs)
    ref = TransformedDistribution(Normal(mean, log_std.exp()),
                                  [TanhTransform(cache_size=1)])
    torch.manual_seed(3)
    ref_action = ref.rsample()
    assert torch.allclose(action, ref_action, atol=1e-6)
    assert torch.allclose(log_prob, ref.log_prob(ref_action).sum(-1),
                          atol=1e-3)
    assert action.abs().max() <= 1


def _grads(module):
    return [p.grad for p in module.parameters()]


def test_each_loss_term_trains_only_its_own_parameters():
    alg = _sac()
    # Critic weights 0: only the actor and alpha terms remain, and neither
    # may move the critics.
    out = alg.minibatch_loss(_batch(), torch.zeros(4), 0.25)
    out.loss.backward()
    assert all(g is None or not g.any() for g in _grads(alg.critics))
    assert all(g is not None and g.any() for g in _grads(alg.actor))
    assert alg.log_alpha.grad is not None and alg.log_alpha.grad != 0
    assert all(g is None for g in _grads(alg.target_critics))


def test_critic_loss_matches_hand_computation():
    alg = _sac(gamma=0.9, initial_alpha=0.5)
    b = _batch()
    torch.manual_seed(7)
    out = alg.minibatch_loss(b, torch.ones(4), 0.25)
    torch.manual_seed(7)
    next_a, next_lp = alg.actor.sample(b.next_observation)
    next_q = alg.target_critics(b.next_observation, next_a).min(0).values
    target = b.reward + 0.9 * (~b.terminated).float() * (next_q -
                                                         0.5 * next_lp)
    q = alg.critics(b.observation, b.action / 2)  # [-2, 2] -> [-1, 1]
    critic = 0.5 * (q - target).square().sum(0).mean()
    assert torch.allclose(out.extra["critic_loss"], critic.detach())
    assert torch.allclose(out.priority, (q - target).abs().mean(0).detach())


def test_target_critics_follow_by_polyak():
    alg = _sac(tau=0.1)
    with torch.no_grad():
        for p in alg.critics.parameters():
            p.add_(1.0)
    before = [p.clone() for p in alg.target_critics.parameters()]
    alg.after_update()
    for b, t, s in zip(before, alg.target_critics.parameters(),
                       alg.critics.parameters()):
        assert torch.allclose(t, 0.9 * b + 0.1 * s)


def test_actions_stay_in_bounds_and_discrete_is_refused():
    alg = _sac()
    obs = torch.randn(100, 3) * 10
    for step in (alg.predict_step(obs), alg.policy_step(obs)):
        assert step.output.abs().max() <= 2
    cfg = TrainerConfig(algorithm_ctor=SACAlgorithm)
    with pytest.raises(ConfigError, match="bounded Box"):
        SACAlgorithm(OBS, gym.spaces.Discrete(2), cfg)


@pytest.mark.parametrize("name,value,valid", [
    ("tau", 0.0, "a number in (0, 1]"),
    ("tau", 1.5, "a number in (0, 1]"),
    ("tau", -0.005, "a number in (0, 1]"),
    ("gamma", 1.01, "a number in [0, 1]"),
    ("gamma", -0.5, "a number in [0, 1]"),
    ("gamma", float("inf"), "a number in [0, 1]"),
    # These were "ValueError: math domain error" from log(initial_alpha).
    ("initial_alpha", 0.0, "a number > 0"),
    ("initial_alpha", -1.0, "a number > 0"),
    ("initial_alpha", "1", "a number > 0"),
    ("target_entropy", float("nan"), "a finite number"),
])
def test_bad_setting_is_one_line_naming_it_and_the_range(name, value, valid):
    from alf.utils.errors import one_line
    with pytest.raises(ConfigError) as info:
        _sac(**{name: value})
    assert one_line(info.value) == (f"SACAlgorithm.{name}={value!r}; "
                                    f"valid: {valid}")


def test_settings_at_the_ends_of_their_ranges_are_accepted():
    alg = _sac(tau=1.0, gamma=1.0, initial_alpha=1e-8, target_entropy=-3)
    assert alg._target_entropy == -3
    _sac(gamma=0.0, tau=1e-6)


@pytest.mark.timeout(240)
def test_sac_learns_pendulum(tmp_path):
    """3,000 env steps take the greedy policy from ~-1200 (random) to
    better than -600."""
    import gin
    import alf.trainers
    alf.trainers.parse_config(["sac_pendulum.gin"], [
        "TrainerConfig.num_env_steps=3000", "TrainerConfig.eval_interval=0",
        "TrainerConfig.seed=1", "TrainerConfig.num_eval_episodes=4"
    ])
    try:
        metrics = Trainer(str(tmp_path)).train()
    finally:
        gin.clear_config()
    assert metrics["average_return"] > -600, metrics
