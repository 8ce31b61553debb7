"""Generalised state-dependent exploration (``gsde_interval``) in
`ActorDistributionNetwork`."""
import copy
import pickle

import gymnasium as gym
import pytest
import torch
from torch import distributions as td

from alf.networks.actor import ActorDistributionNetwork
from alf.networks.distributions import DiagGaussian, TanhGaussian
from alf.utils.errors import ConfigError

OBS = gym.spaces.Box(-1, 1, (3, ))
ACT = gym.spaces.Box(-1, 1, (2, ))


@pytest.fixture(autouse=True)
def seeded():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        yield


def _actor(interval=4, **kwargs):
    return ActorDistributionNetwork(OBS, ACT, hidden_sizes=(16, 16),
                                    gsde_interval=interval, **kwargs)


def test_log_prob_is_the_gaussian_whose_variance_is_features_squared_times_scale():
    actor = _actor()
    with torch.no_grad():
        actor.exploration_log_std.uniform_(-2, 0)
    obs = torch.randn(8, 3)
    dist = actor(obs)
    assert isinstance(dist, DiagGaussian)
    phi = actor.encoder(obs)
    std = ((phi ** 2) @ actor.exploration_log_std.exp() ** 2).sqrt()
    reference = td.Normal(actor.head(phi), std)
    action = dist.sample()
    torch.testing.assert_close(dist.log_prob(action),
                               reference.log_prob(action).sum(-1))
    torch.testing.assert_close(dist.entropy(), reference.entropy().sum(-1))
    torch.testing.assert_close(dist.mode(), actor.head(phi))


def test_the_initial_std_is_init_std_times_the_features_rms():
    actor = _actor(init_log_std=-0.5)
    obs = torch.randn(8, 3)
    phi = actor.encoder(obs)
    rms = phi.pow(2).mean(-1, keepdim=True).sqrt()
    torch.testing.assert_close(actor(obs).log_std.exp(),
                               (torch.tensor(-0.5).exp() * rms).expand(8, 2))


def test_noise_is_kept_for_the_interval_and_differs_between_environments():
    actor = _actor(interval=3)
    obs = torch.randn(1, 3).expand(5, 3)  # five environments, one state
    actions = [actor(obs).sample() for _ in range(7)]
    # One draw per environment for samples 0-2, a new one for 3-5, ...
    for i in (1, 2):
        torch.testing.assert_close(actions[i], actions[0])
    torch.testing.assert_close(actions[4], actions[3])
    assert not torch.allclose(actions[3], actions[0])
    assert not torch.allclose(actions[6], actions[3])
    assert len({tuple(a.tolist()) for a in actions[0]}) == 5
    # For the same draw, the noise follows the state: features @ theta.
    other = torch.randn(5, 3)
    actor._gsde_left = 3
    a, b = actor(obs).sample(), actor(other).sample()
    theta = actor._gsde_draws * actor.exploration_log_std.exp()
    phi_a, phi_b = actor.encoder(obs), actor.encoder(other)
    torch.testing.assert_close(
        a - actor.head(phi_a), torch.einsum("bf,bfa->ba", phi_a, theta))
    torch.testing.assert_close(
        b - actor.head(phi_b), torch.einsum("bf,bfa->ba", phi_b, theta))


def test_sample_spread_matches_the_std_that_log_prob_uses():
    actor = _actor(interval=1)
    obs = torch.randn(1, 3).expand(20000, 3)
    dist = actor(obs)
    with torch.no_grad():
        samples = dist.sample()
    torch.testing.assert_close(samples.std(0), dist.log_std[0].exp(),
                               rtol=0.03, atol=0.0)


def test_squashed_gsde_stays_inside_the_bounds():
    actor = _actor(squash=True)
    dist = actor(torch.randn(64, 3) * 3)
    assert isinstance(dist, TanhGaussian)
    with torch.no_grad():
        actor.exploration_log_std.fill_(3.0)
    a = actor(torch.randn(64, 3)).sample()
    assert (a.abs() <= 1).all()


def test_the_variance_gives_the_encoder_no_gradient():
    actor = _actor()
    actor(torch.randn(8, 3)).log_std.sum().backward()
    assert actor.exploration_log_std.grad.abs().sum() > 0
    assert all(p.grad is None or p.grad.abs().sum() == 0
               for p in actor.encoder.parameters())


def test_draws_are_not_state_and_the_network_copies():
    actor = _actor()
    actor(torch.randn(2, 3)).sample()
    state = actor.state_dict()
    assert "exploration_log_std" in state and "log_std" not in state
    assert not any("draws" in k for k in state)
    clone = pickle.loads(pickle.dumps(copy.deepcopy(actor)))
    clone.load_state_dict(state)
    assert clone(torch.randn(2, 3)).sample().shape == (2, 2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(gsde_interval=0), "gsde_interval=0; valid"),
    (dict(gsde_interval=True), "gsde_interval=True; valid"),
    (dict(gsde_interval=2.5), "gsde_interval=2.5; valid"),
    (dict(gsde_interval=4, beta=True), "neither beta"),
    (dict(gsde_interval=4, state_dependent_std=True), "neither beta"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ActorDistributionNetwork(OBS, ACT, **kwargs)


def test_discrete_actions_ignore_it():
    actor = ActorDistributionNetwork(OBS, gym.spaces.Discrete(3),
                                     gsde_interval=4)
    assert actor(torch.randn(4, 3)).sample().shape == (4, )
