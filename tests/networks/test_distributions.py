"""`alf.networks.distributions` against `torch.distributions`."""
import math

import pytest
import torch
from torch import distributions as td

from alf.networks.distributions import Categorical, DiagGaussian
from alf.utils.errors import ConfigError


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def rng():
    """Seeds torch's global RNG for one test and restores it afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        yield


# ---- Categorical -----------------------------------------------------------


def _logits(b=16, k=5, seed=0):
    return torch.randn(b, k, generator=_gen(seed), dtype=torch.float64) * 2


def test_categorical_log_prob_entropy_mode_match_torch():
    """log_prob, entropy and mode equal torch.distributions.Categorical's."""
    logits = _logits()
    ref = td.Categorical(logits=logits)
    ours = Categorical(logits)
    actions = torch.randint(0, 5, (16, ), generator=_gen(1))
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    assert ours.mode().dtype == torch.int64
    torch.testing.assert_close(ours.mode(), ref.probs.argmax(-1))
    assert ours.log_prob(actions).shape == (16, )
    assert ours.entropy().shape == (16, )


def test_categorical_log_prob_accepts_float_actions():
    """Actions stored as floats (e.g. in a replay buffer) index correctly."""
    logits = _logits()
    actions = torch.randint(0, 5, (16, ), generator=_gen(2))
    torch.testing.assert_close(
        Categorical(logits).log_prob(actions.float()),
        td.Categorical(logits=logits).log_prob(actions))


def test_categorical_kl_matches_torch():
    """KL(p || q) equals torch's kl_divergence for categoricals."""
    p, q = _logits(seed=3), _logits(seed=4)
    expected = td.kl_divergence(td.Categorical(logits=p),
                                td.Categorical(logits=q))
    torch.testing.assert_close(Categorical(p).kl(Categorical(q)), expected)
    # KL of a distribution with itself is zero.
    torch.testing.assert_close(Categorical(p).kl(Categorical(p)),
                               torch.zeros(16, dtype=torch.float64))


def test_categorical_gradients_match_torch():
    """Gradients of log_prob and entropy w.r.t. the logits equal torch's."""
    base = _logits(seed=5)
    actions = torch.randint(0, 5, (16, ), generator=_gen(6))
    weights = torch.randn(16, generator=_gen(7), dtype=torch.float64)

    l1 = base.clone().requires_grad_()
    d = Categorical(l1)
    ((d.log_prob(actions) + d.entropy()) * weights).sum().backward()

    l2 = base.clone().requires_grad_()
    r = td.Categorical(logits=l2)
    ((r.log_prob(actions) + r.entropy()) * weights).sum().backward()

    torch.testing.assert_close(l1.grad, l2.grad)
    assert l1.grad.abs().sum() > 0


def test_categorical_sample_frequencies(rng):
    """20k Gumbel-max samples have per-class frequencies within 4 sigma."""
    probs = torch.tensor([0.05, 0.15, 0.3, 0.5])
    n = 20_000
    logits = probs.log().expand(n, 4)
    samples = Categorical(logits).sample()
    assert samples.shape == (n, )
    assert samples.dtype == torch.int64
    counts = torch.bincount(samples, minlength=4).double()
    expected = n * probs.double()
    sigma = (n * probs.double() * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs() <= 4 * sigma).all(), (counts, expected)
    # Chi-square with 3 degrees of freedom: P(chi2 > 21.1) ~ 1e-4.
    chi2 = ((counts - expected)**2 / expected).sum()
    assert chi2 < 21.1, chi2


def test_categorical_sample_respects_per_row_logits(rng):
    """Each row samples from its own distribution (near-deterministic rows)."""
    logits = torch.full((3, 4), -30.0)
    logits[0, 2] = logits[1, 0] = logits[2, 3] = 30.0
    for _ in range(5):
        assert Categorical(logits).sample().tolist() == [2, 0, 3]


# ---- DiagGaussian ----------------------------------------------------------


def _gaussian_params(b=8, a=3, seed=0, per_row_std=False):
    g = _gen(seed)
    mean = torch.randn(b, a, generator=g, dtype=torch.float64)
    shape = (b, a) if per_row_std else (a, )
    log_std = torch.randn(shape, generator=g, dtype=torch.float64) * 0.5
    return mean, log_std


def _torch_gaussian(mean, log_std):
    return td.Independent(td.Normal(mean, log_std.expand_as(mean).exp()), 1)


@pytest.mark.parametrize("per_row_std", [False, True])
def test_diag_gaussian_log_prob_entropy_mode_match_torch(per_row_std):
    """log_prob, entropy, mode equal torch's Independent(Normal) ones."""
    mean, log_std = _gaussian_params(per_row_std=per_row_std)
    ours, ref = DiagGaussian(mean, log_std), _torch_gaussian(mean, log_std)
    actions = torch.randn(8, 3, generator=_gen(9), dtype=torch.float64) * 2
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    torch.testing.assert_close(ours.mode(), mean)
    assert ours.log_prob(actions).shape == (8, )
    assert ours.entropy().shape == (8, )


def test_diag_gaussian_kl_matches_torch():
    """KL(p || q) equals torch's kl_divergence for diagonal Gaussians."""
    m1, s1 = _gaussian_params(seed=1, per_row_std=True)
    m2, s2 = _gaussian_params(seed=2)
    expected = td.kl_divergence(_torch_gaussian(m1, s1),
                                _torch_gaussian(m2, s2))
    torch.testing.assert_close(
        DiagGaussian(m1, s1).kl(DiagGaussian(m2, s2)), expected)
    torch.testing.assert_close(
        DiagGaussian(m1, s1).kl(DiagGaussian(m1, s1)),
        torch.zeros(8, dtype=torch.float64))


def test_diag_gaussian_gradients_match_torch():
    """Gradients of log_prob/entropy w.r.t. mean and (shared) log_std match."""
    mean0, log_std0 = _gaussian_params(seed=3)
    actions = torch.randn(8, 3, generator=_gen(10), dtype=torch.float64)
    weights = torch.randn(8, generator=_gen(11), dtype=torch.float64)

    grads = []
    for make in (DiagGaussian, _torch_gaussian):
        mean = mean0.clone().requires_grad_()
        log_std = log_std0.clone().requires_grad_()
        d = make(mean, log_std)
        ((d.log_prob(actions) + 0.1 * d.entropy()) * weights).sum().backward()
        grads.append((mean.grad, log_std.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])
    assert grads[0][1].shape == (3, )


def test_diag_gaussian_sample_mean_and_std(rng):
    """20k samples have the right per-dimension mean and std (4 sigma)."""
    n = 20_000
    mu = torch.tensor([1.0, -2.0, 0.5])
    log_std = torch.tensor([0.0, -1.0, 1.0])
    samples = DiagGaussian(mu.expand(n, 3), log_std).sample()
    assert samples.shape == (n, 3)
    std = log_std.exp()
    mean_err = (samples.mean(0) - mu).abs()
    assert (mean_err <= 4 * std / n**0.5).all(), mean_err
    # The sample std of a normal has standard error ~ std / sqrt(2n).
    std_err = (samples.std(0) - std).abs()
    assert (std_err <= 4 * std / (2 * n)**0.5).all(), std_err
    # Dimensions are independent: off-diagonal correlations are ~0.
    corr = torch.corrcoef(samples.T)
    off = corr - torch.diag(torch.diag(corr))
    assert off.abs().max() < 4 / n**0.5


def test_conv_encoder_for_channels_last_images():
    """Image observations (H, W, C) go through convolutions, then the MLP."""
    import gymnasium as gym
    from alf.networks import ValueNetwork
    net = ValueNetwork(gym.spaces.Box(0, 1, (20, 20, 3)), hidden_sizes=(8, ),
                       conv_layers=((4, 4, 2), (8, 3, 1)))
    x = torch.rand(5, 20, 20, 3)
    assert net(x).shape == (5, )
    # Channels are channels: swapping two channels changes the output.
    assert not torch.allclose(net(x), net(x[..., [1, 0, 2]]))
    with pytest.raises(ConfigError, match="conv_layers need"):
        ValueNetwork(gym.spaces.Box(0, 1, (7, )), conv_layers=((4, 3, 1), ))


# ---- tanh-squashed Gaussian -----------------------------------------------
def _torch_tanh_gaussian(mean, log_std, low, high):
    """torch.distributions' reference: N, tanh, then the affine map."""
    half = (high - low) / 2
    return td.TransformedDistribution(
        td.Independent(td.Normal(mean, log_std.exp()), 1),
        [td.TanhTransform(), td.AffineTransform(low + half, half)])


def test_tanh_gaussian_matches_torch_and_stays_inside_the_bounds():
    from alf.networks.distributions import TanhGaussian
    torch.manual_seed(0)
    mean = torch.randn(64, 2) * 2
    log_std = torch.tensor([-0.5, 0.3])
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 4.0])
    mine = TanhGaussian(mean, log_std, low, high)
    ref = _torch_tanh_gaussian(mean, log_std.expand_as(mean), low, high)
    action = mine.sample()
    assert ((action >= low) & (action <= high)).all()
    torch.testing.assert_close(mine.log_prob(action), ref.log_prob(action),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mine.mode(), low + (high - low) *
                               (torch.tanh(mean) + 1) / 2)
    # Rebuilt from its params (also after indexing rows, as a minibatch).
    rows = torch.tensor([3, 7])
    again = TanhGaussian(*[p[rows] for p in mine.params()])
    torch.testing.assert_close(again.log_prob(action[rows]),
                               mine.log_prob(action)[rows])
    # KL is the Gaussians' (tanh is a bijection).
    other = TanhGaussian(mean + 0.1, log_std - 0.2, low, high)
    torch.testing.assert_close(mine.kl(other),
                               DiagGaussian(mean, log_std).kl(
                                   DiagGaussian(mean + 0.1, log_std - 0.2)))


def test_tanh_gaussian_entropy_estimate_is_close_for_narrow_policies():
    from alf.networks.distributions import TanhGaussian
    torch.manual_seed(1)
    mean = torch.randn(8, 2) * 0.5
    dist = TanhGaussian(mean, torch.full((2, ), -2.0), -torch.ones(2),
                        torch.ones(2))
    samples = torch.stack([dist.sample() for _ in range(4000)])
    monte_carlo = -torch.stack([dist.log_prob(s) for s in samples]).mean(0)
    torch.testing.assert_close(dist.entropy(), monte_carlo, atol=0.05,
                               rtol=0)


def test_squashed_actor_acts_inside_bounds_and_refuses_infinite_ones():
    import gymnasium as gym

    from alf.networks.actor import ActorDistributionNetwork
    from alf.utils.errors import ConfigError
    space = gym.spaces.Box(-2.0, 2.0, (1, ))
    actor = ActorDistributionNetwork(gym.spaces.Box(-1, 1, (3, )), space,
                                     squash=True)
    dist = actor(torch.randn(16, 3))
    assert (dist.sample().abs() <= 2).all() and dist.mode().shape == (16, 1)
    with pytest.raises(ConfigError, match="finite action bounds"):
        ActorDistributionNetwork(gym.spaces.Box(-1, 1, (3, )),
                                 gym.spaces.Box(-float("inf"), 0.0, (1, )),
                                 squash=True)


@pytest.mark.parametrize("squash", [False, True])
def test_state_dependent_std_starts_at_init_and_learns_per_state(squash):
    """With ``state_dependent_std`` every state starts at ``init_log_std``;
    the std head gets gradient, so two states can end with different stds
    (a state-independent log std cannot: the negative control)."""
    import gymnasium as gym

    from alf.networks.actor import LOG_STD_RANGE, ActorDistributionNetwork
    obs_space = gym.spaces.Box(-1, 1, (3, ))
    act_space = gym.spaces.Box(-1.0, 1.0, (2, ))
    torch.manual_seed(0)
    obs = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    target = torch.tensor([[-3.0, -3.0], [0.5, 0.5]])  # per-state log stds
    for state_dependent in (True, False):
        actor = ActorDistributionNetwork(
            obs_space, act_space, hidden_sizes=(16, ), init_log_std=-1.0,
            squash=squash, state_dependent_std=state_dependent)
        gaussian = actor(obs)
        gaussian = gaussian.gaussian if squash else gaussian
        assert gaussian.log_std.shape == (2, 2)
        torch.testing.assert_close(gaussian.log_std,
                                   torch.full((2, 2), -1.0), atol=0.05,
                                   rtol=0)
        opt = torch.optim.Adam(actor.parameters(), lr=0.05)
        for _ in range(300):
            g = actor(obs)
            g = g.gaussian if squash else g
            loss = (g.log_std - target).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        g = actor(obs)
        log_std = (g.gaussian if squash else g).log_std.detach()
        if state_dependent:
            torch.testing.assert_close(log_std, target, atol=0.1, rtol=0)
            assert (log_std >= LOG_STD_RANGE[0]).all()
        else:
            assert torch.equal(log_std[0], log_std[1])
    # The clamp: far outside the range, the log std stays inside it.
    actor = ActorDistributionNetwork(obs_space, act_space, squash=squash,
                                     state_dependent_std=True)
    with torch.no_grad():
        actor.std_head.bias.fill_(100.0)
    log_std = actor(obs)
    log_std = (log_std.gaussian if squash else log_std).log_std
    assert (log_std == LOG_STD_RANGE[1]).all()


# ---- Beta on the box --------------------------------------------------------
def _beta_case():
    from alf.networks.distributions import Beta
    torch.manual_seed(2)
    alpha = 1 + torch.rand(64, 2) * 4
    beta = 1 + torch.rand(64, 2) * 4
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 4.0])
    return Beta(alpha, beta, low, high), alpha, beta, low, high


def test_beta_matches_torch_on_the_box():
    mine, alpha, beta, low, high = _beta_case()
    width = high - low
    ref = td.Independent(td.Beta(alpha, beta), 1)
    action = mine.sample()
    assert ((action >= low) & (action <= high)).all()
    x = (action - low) / width
    torch.testing.assert_close(mine.log_prob(action),
                               ref.log_prob(x) - width.log().sum(),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mine.entropy(),
                               ref.entropy() + width.log().sum(),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mine.mode(), low + width * alpha /
                               (alpha + beta))
    from alf.networks.distributions import Beta
    other = Beta(alpha.flip(0), beta + 0.5, low, high)
    torch.testing.assert_close(
        mine.kl(other), td.kl_divergence(
            ref, td.Independent(td.Beta(alpha.flip(0), beta + 0.5), 1)),
        rtol=1e-4, atol=1e-4)
    # Rebuilt from its params (also after indexing rows, as a minibatch).
    rows = torch.tensor([3, 7])
    again = Beta(*[p[rows] for p in mine.params()])
    torch.testing.assert_close(again.log_prob(action[rows]),
                               mine.log_prob(action)[rows])


def test_beta_samples_have_its_mean_and_bounds_have_finite_log_prob():
    mine, alpha, beta, low, high = _beta_case()
    samples = torch.stack([mine.sample() for _ in range(4000)])
    torch.testing.assert_close(samples.mean(0), mine.mode(), atol=0.06,
                               rtol=0)
    ab = alpha + beta
    std = (high - low) * (alpha * beta / (ab * ab * (ab + 1))).sqrt()
    torch.testing.assert_close(samples.std(0), std, atol=0.0, rtol=0.08)
    # A float32 sample can land on a bound: its log-prob stays finite.
    assert torch.isfinite(mine.log_prob(low.expand(64, 2))).all()
    assert torch.isfinite(mine.log_prob(high.expand(64, 2))).all()


def test_beta_actor_is_unimodal_inside_the_bounds_and_refuses_misuse():
    import gymnasium as gym

    from alf.networks.actor import ActorDistributionNetwork
    from alf.networks.distributions import Beta
    from alf.utils.errors import ConfigError
    obs_space = gym.spaces.Box(-1, 1, (3, ))
    space = gym.spaces.Box(-2.0, 2.0, (2, ))
    actor = ActorDistributionNetwork(obs_space, space, beta=True)
    assert not hasattr(actor, "log_std")  # no parameter without gradient
    dist = actor(torch.randn(16, 3))
    assert isinstance(dist, Beta)
    assert (dist.alpha > 1).all() and (dist.beta > 1).all()
    assert (dist.sample().abs() <= 2).all() and dist.mode().shape == (16, 2)
    # Starts centred: the head is initialised near zero.
    torch.testing.assert_close(dist.mode(), torch.zeros(16, 2), atol=0.05,
                               rtol=0)
    # Its mean can learn to sit next to a bound (a clipped Gaussian's
    # would pass it).
    opt = torch.optim.Adam(actor.parameters(), lr=0.05)
    obs = torch.randn(16, 3)
    for _ in range(200):
        loss = (actor(obs).mode() - 1.9).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    mean = actor(obs).mode().detach()
    assert (mean > 1.8).all() and (mean < 2.0).all()
    with pytest.raises(ConfigError, match="beta=True needs finite"):
        ActorDistributionNetwork(obs_space,
                                 gym.spaces.Box(-float("inf"), 0.0, (1, )),
                                 beta=True)
    for bad in (dict(squash=True), dict(state_dependent_std=True)):
        with pytest.raises(ConfigError, match="beta=True is a distribution"):
            ActorDistributionNetwork(obs_space, space, beta=True, **bad)


def test_beta_concentration_scale_keeps_the_mean_and_narrows_the_noise():
    import gymnasium as gym

    from alf.networks.actor import ActorDistributionNetwork
    obs_space = gym.spaces.Box(-1, 1, (3, ))
    space = gym.spaces.Box(-2.0, 2.0, (2, ))
    obs = torch.randn(8, 3)
    dists = {}
    for scale in (1.0, 4.0):
        torch.manual_seed(0)  # the same weights
        actor = ActorDistributionNetwork(obs_space, space, beta=True,
                                         beta_concentration_scale=scale)
        dists[scale] = actor(obs)
    wide, narrow = dists[1.0], dists[4.0]
    torch.testing.assert_close(narrow.alpha, 4 * wide.alpha)
    torch.testing.assert_close(narrow.mode(), wide.mode())
    # Beta(a, b)'s variance is ab / ((a + b)^2 (a + b + 1)): with both
    # concentrations x4 (a = b ~ 1.69 here) it is 3.4x smaller.
    torch.manual_seed(1)
    with torch.no_grad():
        variance = {s: torch.stack([d.sample() for _ in range(4000)]).var(0)
                    for s, d in dists.items()}
    ratio = variance[1.0] / variance[4.0]
    assert ((ratio > 2.9) & (ratio < 4.0)).all(), ratio
    with pytest.raises(ConfigError, match="beta_concentration_scale=0"):
        ActorDistributionNetwork(obs_space, space, beta=True,
                                 beta_concentration_scale=0)


def test_noise_can_be_set_per_action_dimension():
    """A sequence gives each action dimension its own initial log std
    (Gaussian, gSDE) or concentration scale (Beta); a wrong length is a
    one-line error naming the setting."""
    import gymnasium as gym

    from alf.networks.actor import ActorDistributionNetwork
    obs_space = gym.spaces.Box(-1, 1, (3, ))
    space = gym.spaces.Box(-1.0, 1.0, (2, ))
    obs = torch.randn(8, 3)
    gauss = ActorDistributionNetwork(obs_space, space,
                                     init_log_std=(-1.0, 0.5))
    assert gauss.log_std.tolist() == [-1.0, 0.5]
    gsde = ActorDistributionNetwork(obs_space, space, gsde_interval=2,
                                    init_log_std=[-1.0, 0.5])
    column = gsde.exploration_log_std[0] + 0.5 * math.log(64)
    torch.testing.assert_close(column, torch.tensor([-1.0, 0.5]))
    torch.manual_seed(0)
    one = ActorDistributionNetwork(obs_space, space, beta=True)
    torch.manual_seed(0)
    two = ActorDistributionNetwork(obs_space, space, beta=True,
                                   beta_concentration_scale=(4.0, 1.0))
    wide, mixed = one(obs), two(obs)
    torch.testing.assert_close(mixed.alpha[:, 0], 4 * wide.alpha[:, 0])
    torch.testing.assert_close(mixed.beta[:, 1], wide.beta[:, 1])
    torch.testing.assert_close(mixed.mode(), wide.mode())
    for name, value in (("init_log_std", (0.0, 0.0, 0.0)),
                        ("beta_concentration_scale", (1.0, )),
                        ("beta_concentration_scale", (1.0, -1.0))):
        kw = {name: value, "beta": name.startswith("beta")}
        with pytest.raises(ConfigError, match=f"{name}="):
            ActorDistributionNetwork(obs_space, space, **kw)


def test_the_concentration_scale_is_in_checkpoints_and_old_ones_load():
    import gymnasium as gym

    from alf.networks.actor import ActorDistributionNetwork
    obs_space = gym.spaces.Box(-1, 1, (3, ))
    space = gym.spaces.Box(-1.0, 1.0, (2, ))
    trained = ActorDistributionNetwork(obs_space, space, beta=True)
    trained.concentration_scale.fill_(5.0)  # where a schedule left it
    fresh = ActorDistributionNetwork(obs_space, space, beta=True)
    fresh.load_state_dict(trained.state_dict())
    assert float(fresh.concentration_scale) == 5.0
    # A checkpoint from before the scale was kept loads, strictly, with
    # the configured scale.
    old = {k: v for k, v in trained.state_dict().items()
           if k != "concentration_scale"}
    configured = ActorDistributionNetwork(obs_space, space, beta=True,
                                          beta_concentration_scale=2.0)
    configured.load_state_dict(old)
    assert float(configured.concentration_scale) == 2.0
    # Not a Beta policy: no such buffer.
    assert "concentration_scale" not in ActorDistributionNetwork(
        obs_space, space).state_dict()
