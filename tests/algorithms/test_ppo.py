"""PPO: the loss against a hand computation, and a short learning run."""
import dataclasses
import math

import gymnasium as gym
import pytest
import torch

from alf.algorithms.ppo_algorithm import (PPOAlgorithm, PPOBatch, PPOTrainInfo,
                                         uneven_minibatch_indices)
from alf import nest
from alf.data_structures import Experience
from alf.trainers import Trainer
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import distributed
from alf.utils.errors import TrainingError
from distributed_harness import run_ranks, values


def _ppo(**kw):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=2, minibatch_size=4)
    return PPOAlgorithm(gym.spaces.Box(-1, 1, (2, )), gym.spaces.Discrete(2),
                        cfg, **kw)


def _batch():
    log_prob = torch.tensor([math.log(0.5), math.log(0.4), math.log(0.2)])
    return PPOBatch(observation=torch.zeros(3, 2),
                    action=torch.tensor([0, 1, 1]),
                    log_prob=log_prob,
                    value=torch.tensor([1.0, 0.0, 2.0]),
                    advantage=torch.tensor([1.0, -2.0, 0.5]),
                    returns=torch.tensor([2.0, -2.0, 2.5]),
                    start_log_prob=log_prob)


def _info():
    # New log-probs: ratios 0.55/0.5=1.1, 0.3/0.4=0.75, 0.3/0.2=1.5.
    return PPOTrainInfo(
        log_prob=torch.log(torch.tensor([0.55, 0.3, 0.3])),
        entropy=torch.tensor([0.6, 0.5, 0.4]),
        value=torch.tensor([1.5, -1.0, 2.0]))


def test_ppo_loss_matches_hand_computation():
    alg = _ppo(clip_ratio=0.2, value_loss_coef=0.5, entropy_coef=0.01)
    loss = alg.calc_loss(_batch(), _info())
    # Surrogates min(r A, clip(r) A):
    #   r=1.1,  A=1   -> min(1.1, 1.1)      = 1.1
    #   r=0.75, A=-2  -> min(-1.5, -1.6)    = -1.6  (clip at 0.8)
    #   r=1.5,  A=0.5 -> min(0.75, 0.6)     = 0.6   (clip at 1.2)
    policy_loss = -(1.1 - 1.6 + 0.6) / 3
    value_loss = 0.5 * ((1.5 - 2)**2 + (-1 + 2)**2 + (2 - 2.5)**2) / 3
    entropy = (0.6 + 0.5 + 0.4) / 3
    total = policy_loss + 0.5 * value_loss - 0.01 * entropy
    assert loss.extra["policy_loss"].item() == pytest.approx(policy_loss,
                                                             abs=1e-6)
    assert loss.extra["value_loss"].item() == pytest.approx(value_loss,
                                                            abs=1e-6)
    assert loss.loss.item() == pytest.approx(total, abs=1e-6)
    # Two of three ratios lie outside [0.8, 1.2].
    assert loss.extra["clip_fraction"].item() == pytest.approx(2 / 3)


def test_value_clipping_takes_the_larger_error():
    alg = _ppo(value_clip=0.2)
    loss = alg.calc_loss(_batch(), _info())
    # Old values 1, 0, 2 move to 1.5, -1, 2: clipped to 1.2, -0.2, 2.
    errors = [max((1.5 - 2)**2, (1.2 - 2)**2), max((-1 + 2)**2,
                                                   (-0.2 + 2)**2),
              max((2 - 2.5)**2, (2 - 2.5)**2)]
    assert loss.extra["value_loss"].item() == pytest.approx(
        0.5 * sum(errors) / 3, abs=1e-6)


def test_minibatch_advantages_are_standardised_per_minibatch():
    alg = _ppo()
    adv = torch.tensor([1.0, 2.0, 3.0, 10.0, 20.0, 30.0])
    idx = [torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5])]
    a, b = alg._minibatch_advantages(adv, idx)
    ref = (torch.tensor([1.0, 2, 3]) - 2) / torch.tensor([1.0, 2, 3]).std(
        correction=0)
    assert torch.allclose(a, ref, atol=1e-5)
    assert torch.allclose(b, ref, atol=1e-5)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("extra", [
    [], ["PPOAlgorithm.explore_fraction=0.5",
         'TrainerConfig.unroll_mode="async"']])
def test_ppo_learns_cart_pole(tmp_path, extra):
    """A short run clearly beats a random policy (~22); also with half the
    steps acting with the mode, through the actor processes (whose stored
    log-densities carry the +inf).

    That second run's timing decides which policy version acts on which
    step, so its seed does not fix its result. Its final evaluation spread
    like a fresh seed's (2026-11-30, under load): at 15k env steps over
    121-500 in 10 runs and once 76.5 in CI (synchronous seeds 1-6 gave
    118-480); at 30k, 131-500 in 12 runs. Hence 30k steps for it."""
    import gin
    import alf.trainers
    steps = 30720 if extra else 15360
    alf.trainers.parse_config(["ppo_cart_pole.gin"], [
        f"TrainerConfig.num_env_steps={steps}",
        "TrainerConfig.eval_interval=0", "TrainerConfig.seed=1"
    ] + extra)
    try:
        metrics = Trainer(str(tmp_path)).train()
    finally:
        gin.clear_config()
    assert metrics["average_return"] > (100 if extra else 150), metrics


@pytest.mark.parametrize("world", [1, 2])
def test_minibatch_larger_than_the_unroll_is_refused(world):
    from alf.utils.errors import ConfigError
    # A rank's config, built without per_rank (which refuses it itself:
    # test_trainer_config).
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=4,
                        unroll_length=8, minibatch_size=64, world_size=world)
    with pytest.raises(ConfigError) as info:
        PPOAlgorithm(gym.spaces.Box(-1, 1, (2, )), gym.spaces.Discrete(2),
                     cfg)
    msg = str(info.value).splitlines()[0]
    assert msg.startswith("TrainerConfig.minibatch_size=64 is more than the "
                          "32 transitions of one iteration (num_envs=4 x "
                          "unroll_length=8)"), msg
    assert msg.endswith("use at most 32")
    assert ("per process, 32 of 16" in msg) == (world == 2)
    PPOAlgorithm(gym.spaces.Box(-1, 1, (2, )), gym.spaces.Discrete(2),
                 dataclasses.replace(cfg, minibatch_size=32))


# ---- uneven batches: 2 ranks with unrolls of 3 and 5 steps ---------------
UT, UB, UOBS = 8, 8, 3  # global envs; 4 per rank
STEPS = (3, 5)  # rank 0 ended its rollout early


def _uneven_data():
    g = torch.Generator().manual_seed(7)
    raw = torch.randn(UT + 1, UB, UOBS, generator=g) * 2 + 0.5
    terminated = torch.zeros(UT, UB, dtype=torch.bool)
    terminated[1, 2] = terminated[3, 6] = True
    return raw, Experience(
        observation=raw[:-1], action=torch.randint(0, 2, (UT, UB), generator=g),
        reward=torch.rand(UT, UB, generator=g), terminated=terminated,
        truncated=torch.zeros(UT, UB, dtype=torch.bool),
        next_observation=raw[1:], rollout_info=torch.full((UT, UB), -0.7))


def _rank_part(rank):
    """Rank ``rank``'s environments and the steps it collected."""
    raw, exp = _uneven_data()
    cols = slice(rank * UB // 2, (rank + 1) * UB // 2)
    t = STEPS[rank]
    return raw[:t, cols], nest.map_structure(lambda x: x[:t, cols], exp)


def _uneven_alg(world, uneven=True):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=UB,
                        unroll_length=UT, minibatch_size=UT * UB,
                        num_epochs=3).per_rank(world)
    torch.manual_seed(0)
    return PPOAlgorithm(gym.spaces.Box(-10, 10, (UOBS, )),
                        gym.spaces.Discrete(2), cfg,
                        normalize_observations=True, uneven_batches=uneven)


def _uneven_rank(rank, world, uneven):
    alg = _uneven_alg(world, uneven)
    distributed.activate_ddp(alg)
    obs, exp = _rank_part(rank)
    for t in range(obs.shape[0]):
        alg.observe(obs[t])
        alg.store(nest.map_structure(lambda x: x[t], exp))
    alg.train_iter(0.0)
    return {n: t.clone() for n, t in distributed.synced_state(alg)}


def _union_reference():
    """One process trained on the union of both ranks' samples."""
    alg = _uneven_alg(1)
    parts = [_rank_part(r) for r in range(2)]
    for obs, _ in parts:
        for t in range(obs.shape[0]):
            alg.observe(obs[t])
    alg._commit_normalizer()
    batches = [alg._prepare_batch(exp) for _, exp in parts]
    alg.train_on_batch(PPOBatch(*[torch.cat(x) for x in zip(*batches)]))
    return {n: t.clone() for n, t in distributed.synced_state(alg)}


@pytest.mark.timeout(120)
def test_uneven_batches_equal_one_process_on_the_union():
    ref = _union_reference()
    exact = values(run_ranks(_uneven_rank, 2, True))
    plain = values(run_ranks(_uneven_rank, 2, False))
    worst = {}
    for name, r in ref.items():
        for state in exact:
            diff = (state[name].double() - r.double()).abs().max().item()
            assert diff <= 1e-5, f"{name}: max abs diff {diff}"
        worst[name] = (plain[0][name].double() - r.double()).abs().max()
    # Without the weights, DDP's plain average of the ranks' means is not
    # the mean over the union (the test can tell the two apart).
    assert max(worst.values()) > 1e-4


def test_uneven_minibatches_have_the_same_count_and_cover_every_row():
    parts = uneven_minibatch_indices(13, 4, 2)
    assert len(parts) == 8 and [len(p) for p in parts[:4]] == [4, 3, 3, 3]
    assert sorted(torch.cat(parts[:4]).tolist()) == list(range(13))
    with pytest.raises(TrainingError, match="fewer than the 4 minibatches"):
        uneven_minibatch_indices(3, 4, 1)


def test_ragged_unroll_trains_on_each_environments_real_steps_only():
    """An asynchronous unroll cut by preemption: environment b has
    lengths[b] real steps, then copies of its last one. The batch holds
    exactly the real steps, with each column's advantages as if it had been
    an unroll of its own length (the last real step bootstraps from V(s'))."""
    raw, exp = _uneven_data()
    lengths = torch.tensor([8, 3, 1, 5, 8, 2, 6, 4])
    step = torch.arange(UT)[:, None]
    last = (step.clamp(max=lengths - 1)).expand(UT, UB)
    padded = nest.map_structure(  # each column's last real step repeated
        lambda x: x.gather(0, last.view(UT, UB, *[1] * (x.dim() - 2))
                           .expand_as(x)), exp)
    alg = _uneven_alg(1)
    alg.set_unroll_lengths(lengths)
    batch = alg._prepare_batch(padded)
    alg.unroll_lengths = None
    assert batch.advantage.shape[0] == int(lengths.sum())
    # Row order: time-major over the real steps.
    keep = (step < lengths).flatten()
    col_of_row = torch.arange(UB).repeat(UT)[keep]
    for b in range(UB):
        alone = alg._prepare_batch(nest.map_structure(
            lambda x: x[:int(lengths[b]), b:b + 1], exp))
        mine = col_of_row == b
        torch.testing.assert_close(batch.advantage[mine], alone.advantage)
        torch.testing.assert_close(batch.returns[mine], alone.returns)
        torch.testing.assert_close(batch.observation[mine],
                                   alone.observation)
    # Negative control: without the lengths the padding flows back into
    # the real steps' advantages.
    blind = alg._prepare_batch(padded).advantage.view(UT, UB)
    assert not torch.allclose(blind[0, 1], batch.advantage[col_of_row == 1][0])


def _gaussian_ppo(**kw):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4)
    return PPOAlgorithm(gym.spaces.Box(-1, 1, (3, )),
                        gym.spaces.Box(-1, 1, (2, )), cfg, **kw)


def _box_unroll(margin: float = 0.0) -> Experience:
    """A 4-step unroll of 2 environments with 2-d actions inside the box
    [-1 + margin, 1 - margin]."""
    return Experience(
        observation=torch.randn(4, 2, 3),
        action=(torch.rand(4, 2, 2) * 2 - 1) * (1 - margin),
        reward=torch.randn(4, 2),
        terminated=torch.zeros(4, 2, dtype=torch.bool),
        truncated=torch.zeros(4, 2, dtype=torch.bool),
        next_observation=torch.randn(4, 2, 3),
        rollout_info=torch.full((4, 2), -1.0),
        policy_version=torch.zeros(4, 2, dtype=torch.int64))


def test_log_std_bound_moves_linearly_and_clamps_after_training():
    alg = _gaussian_ppo(log_std_bound=(0.0, -2.0))
    with torch.no_grad():
        alg.actor.log_std.fill_(0.5)
    exp = _box_unroll()
    alg.train_on_unroll(exp, progress=0.25)
    assert torch.allclose(alg.actor.log_std, torch.full((2, ), -0.5))
    # Below the bound it is left alone; the bound never passes its end.
    with torch.no_grad():
        alg.actor.log_std.copy_(torch.tensor([-3.0, 1.0]))
    alg.bound_log_std(1.7)
    assert alg.actor.log_std.tolist() == [-3.0, -2.0]
    # Negative control: no bound, no clamp.
    free = _gaussian_ppo()
    with torch.no_grad():
        free.actor.log_std.fill_(0.5)
    free.bound_log_std(1.0)
    assert free.actor.log_std.tolist() == [0.5, 0.5]


@pytest.mark.parametrize("bound,match", [
    ((0.0, ), "two numbers"), ("x", "two numbers"),
])
def test_a_malformed_log_std_bound_is_refused(bound, match):
    from alf.utils.errors import ConfigError
    with pytest.raises(ConfigError, match=match):
        _gaussian_ppo(log_std_bound=bound)
    with pytest.raises(ConfigError, match="needs a Gaussian"):
        _ppo(log_std_bound=(0.0, -1.0))


def test_log_std_bound_refuses_a_state_dependent_std():
    """Clamping the log std's bias would not bound a state-dependent std."""
    import functools

    from alf.networks.actor import ActorDistributionNetwork
    from alf.utils.errors import ConfigError
    ctor = functools.partial(ActorDistributionNetwork,
                             state_dependent_std=True)
    with pytest.raises(ConfigError, match="state_dependent_std=True"):
        _gaussian_ppo(log_std_bound=(0.0, -1.0), actor_network_ctor=ctor)
    _gaussian_ppo(actor_network_ctor=ctor)  # without a bound: fine


def test_beta_concentration_schedule_waits_then_sharpens_and_reaches_actors():
    import functools

    from alf.networks.actor import ActorDistributionNetwork
    from alf.utils.errors import ConfigError
    beta = functools.partial(ActorDistributionNetwork, beta=True,
                             beta_concentration_scale=2.0)
    alg = _gaussian_ppo(actor_network_ctor=beta,
                        beta_concentration_schedule=(0.5, 6.0))
    exp = _box_unroll(margin=0.1)
    obs = torch.randn(5, 3)
    for progress, scale in ((0.25, 2.0), (0.75, 4.0), (1.0, 6.0),
                            (1.5, 6.0)):
        alg.train_on_unroll(exp, progress)
        assert float(alg.actor.concentration_scale) == pytest.approx(scale)
    # The scale is part of what actors act with.
    actor_copy = _gaussian_ppo(actor_network_ctor=beta)
    actor_copy.load_acting_state(alg.acting_state())
    assert float(actor_copy.actor.concentration_scale) == pytest.approx(6.0)
    with torch.no_grad():
        torch.testing.assert_close(actor_copy.actor(obs).alpha,
                                   alg.actor(obs).alpha)
    with pytest.raises(ConfigError, match="needs a Beta policy"):
        _gaussian_ppo(beta_concentration_schedule=(0.5, 4.0))
    for bad in ((1.0, 4.0), (0.5, 0.4, 4.0), (0.2, 1.5, 4.0), (0.2, 0.0),
                (0.1, 0.2, 0.3, 4.0)):
        with pytest.raises(ConfigError, match="0 <= start < end <= 1"):
            _gaussian_ppo(actor_network_ctor=beta,
                          beta_concentration_schedule=bad)


def test_a_beta_schedule_that_ends_early_holds_its_final_scale():
    """``(start, end, final)``: the scale moves between progress ``start``
    and ``end``, then the policy trains on at the final noise."""
    import functools

    from alf.networks.actor import ActorDistributionNetwork
    beta = functools.partial(ActorDistributionNetwork, beta=True)
    alg = _gaussian_ppo(actor_network_ctor=beta,
                        beta_concentration_schedule=(0.2, 0.6, 5.0))
    exp = _box_unroll(margin=0.1)
    for progress, scale in ((0.1, 1.0), (0.4, 3.0), (0.6, 5.0),
                            (0.9, 5.0)):
        alg.train_on_unroll(exp, progress)
        assert float(alg.actor.concentration_scale) == pytest.approx(scale)


def test_a_beta_schedule_can_narrow_one_action_dimension_only():
    """A per-dimension ``final``: the steering narrows, the throttle keeps
    its noise; the buffer keeps one scale per dimension from then on, in
    what the actors load."""
    import functools

    from alf.networks.actor import ActorDistributionNetwork
    from alf.utils.errors import ConfigError
    beta = functools.partial(ActorDistributionNetwork, beta=True)
    alg = _gaussian_ppo(actor_network_ctor=beta,
                        beta_concentration_schedule=(0.0, 0.5, (5.0, 1.0)))
    assert alg.actor.concentration_scale.tolist() == [1.0, 1.0]
    exp = _box_unroll(margin=0.1)
    for progress, scales in ((0.25, [3.0, 1.0]), (0.9, [5.0, 1.0])):
        alg.train_on_unroll(exp, progress)
        assert alg.actor.concentration_scale.tolist() == \
            pytest.approx(scales)
    actor_copy = _gaussian_ppo(actor_network_ctor=beta,
                               beta_concentration_schedule=(0.0, (1.0, 1.0)))
    actor_copy.load_acting_state(alg.acting_state())
    assert actor_copy.actor.concentration_scale.tolist() == [5.0, 1.0]
    for bad in ((0.5, (4.0, )), (0.5, (4.0, 0.0)), (0.5, (4.0, "x"))):
        with pytest.raises(ConfigError, match="beta_concentration_schedule"):
            _gaussian_ppo(actor_network_ctor=beta,
                          beta_concentration_schedule=bad)


def test_gsde_rollout_log_probs_are_the_acting_policys_and_training_moves_its_std():
    """With gSDE the stored log-probability is that of the per-state
    Gaussian the sample came from (what PPO's ratio divides by), and an
    update trains ``exploration_log_std``; the log-std bound refuses it."""
    import functools

    from alf.networks.actor import ActorDistributionNetwork
    from alf.utils.errors import ConfigError
    ctor = functools.partial(ActorDistributionNetwork, gsde_interval=2)
    alg = _gaussian_ppo(actor_network_ctor=ctor)
    obs = torch.randn(2, 3)
    step = alg.rollout_step(obs)
    torch.testing.assert_close(step.info,
                               alg.actor(obs).log_prob(step.output))
    torch.testing.assert_close(alg.rollout_step(obs).output, step.output)
    before = alg.actor.exploration_log_std.detach().clone()
    exp = _box_unroll()
    exp = exp._replace(rollout_info=alg.actor(
        exp.observation.flatten(0, 1)).log_prob(
            exp.action.flatten(0, 1)).view(4, 2).detach())
    alg.train_on_unroll(exp, progress=0.0)
    assert not torch.equal(alg.actor.exploration_log_std, before)
    with pytest.raises(ConfigError, match="or gSDE"):
        _gaussian_ppo(log_std_bound=(0.0, -1.0), actor_network_ctor=ctor)


def test_a_run_resumed_under_a_schedule_of_the_other_form_loads():
    """A checkpoint with one Beta scale per dimension loads into a run
    whose schedule has one for all (and the other way round): its scales
    are kept, one per dimension, and the schedule moves them on."""
    import functools

    from alf.networks.actor import ActorDistributionNetwork
    beta = functools.partial(ActorDistributionNetwork, beta=True)
    per_dim = _gaussian_ppo(actor_network_ctor=beta,
                            beta_concentration_schedule=(0.0, (5.0, 1.0)))
    per_dim.train_on_unroll(_box_unroll(margin=0.1), 0.5)
    assert per_dim.actor.concentration_scale.tolist() == [3.0, 1.0]
    scalar = _gaussian_ppo(actor_network_ctor=beta,
                           beta_concentration_schedule=(0.0, 5.0))
    scalar.load_state_dict(per_dim.state_dict())
    assert scalar.actor.concentration_scale.tolist() == [3.0, 1.0]
    scalar.train_on_unroll(_box_unroll(margin=0.1), 1.0)
    assert scalar.actor.concentration_scale.tolist() == [5.0, 5.0]

    one = _gaussian_ppo(actor_network_ctor=beta,
                        beta_concentration_schedule=(0.0, 3.0))
    one.train_on_unroll(_box_unroll(margin=0.1), 0.5)
    assert one.actor.concentration_scale.dim() == 0
    per_dim.load_state_dict(one.state_dict())
    assert per_dim.actor.concentration_scale.tolist() == [2.0, 2.0]
    # Other actors load as before (a categorical one has no bounds).
    import gymnasium as gym
    categorical = ActorDistributionNetwork(
        gym.spaces.Box(-1, 1, (3, )), gym.spaces.Discrete(2))
    categorical.load_state_dict(categorical.state_dict())


def test_explore_fraction_acts_with_the_mode_on_the_other_steps():
    torch.manual_seed(0)
    alg = _gaussian_ppo(explore_fraction=0.25)
    obs = torch.randn(4000, 3)
    step = alg.rollout_step(obs)
    dist = alg.actor(obs)
    sampled = torch.isfinite(step.info)
    assert 0.22 < sampled.float().mean().item() < 0.28
    # Mode steps: the deterministic action and a point mass's +inf.
    assert torch.equal(step.output[~sampled], dist.mode()[~sampled])
    assert torch.all(step.info[~sampled] == math.inf)
    # Sampled steps: a draw (never the mode) and its own log-density.
    assert not torch.isclose(step.output[sampled],
                             dist.mode()[sampled]).all(-1).any()
    torch.testing.assert_close(step.info[sampled],
                               dist.log_prob(step.output)[sampled])
    # Negative control: the default samples every step.
    assert torch.isfinite(_gaussian_ppo().rollout_step(obs).info).all()


def test_explore_fraction_with_discrete_actions():
    torch.manual_seed(0)
    step = _ppo(explore_fraction=0.5).rollout_step(torch.randn(1000, 2))
    assert step.output.shape == (1000, )
    assert 0.45 < torch.isfinite(step.info).float().mean().item() < 0.55


def test_mode_steps_take_no_part_in_the_policy_terms():
    alg = _ppo(clip_ratio=0.2, value_loss_coef=0.5)
    batch, info = _batch(), _info()
    # A fourth step that acted with the mode: it changes the value loss
    # only.
    mixed = PPOBatch(*[torch.cat([x, x[:1]]) for x in batch])
    mixed = mixed._replace(log_prob=torch.cat(
        [batch.log_prob, torch.tensor([math.inf])]),
        start_log_prob=torch.cat([batch.start_log_prob,
                                  torch.tensor([math.inf])]))
    new = PPOTrainInfo(*[torch.cat([x, x[:1]]).requires_grad_()
                         for x in info])
    loss = alg.calc_loss(mixed, new)
    alone = alg.calc_loss(batch, info)
    for key in ("policy_loss", "approx_kl", "clip_fraction"):
        assert loss.extra[key].item() == pytest.approx(
            alone.extra[key].item(), abs=1e-6), key
    assert loss.extra["value_loss"].item() == pytest.approx(
        0.5 * ((1.5 - 2)**2 + 1 + (2 - 2.5)**2 + (1.5 - 2)**2) / 4)
    loss.loss.backward()
    assert torch.isfinite(new.log_prob.grad).all()
    # Steps 2 and 3 are clipped (no gradient); step 1 is not.
    assert new.log_prob.grad[3] == 0 and new.log_prob.grad[0] != 0


@pytest.mark.parametrize("name, bad, valid", [
    ("gamma", 1.5, "a number in [0, 1]"),
    ("gamma", -1.0, "a number in [0, 1]"),
    ("gae_lambda", 2.0, "a number in [0, 1]"),
    ("clip_ratio", 0.0, "a number > 0"),
    ("clip_ratio", -0.2, "a number > 0"),
    ("entropy_coef", -1.0, "a number >= 0"),
    ("value_loss_coef", -5.0, "a number >= 0"),
    ("reward_scale", -0.1, "a number > 0"),
    ("adam_eps", 0, "a number > 0"),
    ("value_clip", 0.0, "a number > 0"),
    ("target_kl", "0.01", "a number > 0"),
    ("gamma", float("nan"), "a number in [0, 1]")])
def test_ppo_numbers_out_of_range_are_refused(name, bad, valid):
    """They trained without a word (a discount above 1 diverging, a
    negative coefficient training the wrong way)."""
    from alf.utils.errors import ConfigError
    with pytest.raises(ConfigError) as info:
        _ppo(**{name: bad})
    assert str(info.value).splitlines()[0] == (
        f"PPOAlgorithm.{name}={bad!r}; valid: {valid}")
    _ppo(**{name: None if name in ("value_clip", "target_kl") else 1.0})


@pytest.mark.parametrize("fraction", [0.0, 1.5, -0.1])
def test_an_explore_fraction_outside_0_1_is_refused(fraction):
    from alf.utils.errors import ConfigError
    with pytest.raises(ConfigError, match="explore_fraction"):
        _ppo(explore_fraction=fraction)


def test_explore_fraction_schedule_moves_the_fraction_to_actors_and_checkpoints():
    """``(start, end, final)``: the fraction waits, falls linearly, holds;
    the actor processes act with it and a resumed run starts from it."""
    torch.manual_seed(0)
    alg = _gaussian_ppo(explore_fraction_schedule=(0.5, 0.75, 0.25))
    exp = _box_unroll(margin=0.1)
    obs = torch.randn(4000, 3)
    for progress, fraction in ((0.25, 1.0), (0.625, 0.625), (0.75, 0.25),
                               (1.0, 0.25)):
        stats = alg.train_on_unroll(exp, progress)
        assert stats["explore_fraction"].item() == pytest.approx(fraction)
        sampled = torch.isfinite(alg.rollout_step(obs).info).float().mean()
        assert sampled.item() == pytest.approx(fraction, abs=0.03)
    actor_copy = _gaussian_ppo(explore_fraction_schedule=(0.5, 0.75, 0.25))
    actor_copy.load_acting_state(alg.acting_state())
    assert torch.isfinite(actor_copy.rollout_step(obs).info).float().mean(
    ).item() == pytest.approx(0.25, abs=0.03)
    resumed = _gaussian_ppo(explore_fraction_schedule=(0.5, 0.75, 0.25))
    assert torch.isfinite(resumed.rollout_step(obs).info).all()
    resumed.load_state_dict(alg.state_dict())
    assert torch.isfinite(resumed.rollout_step(obs).info).float().mean(
    ).item() == pytest.approx(0.25, abs=0.03)
    # Without a schedule nothing is added to the checkpoint or the stats.
    plain = _gaussian_ppo(explore_fraction=0.5)
    assert "explore_fraction_now" not in plain.state_dict()
    assert "explore_fraction" not in plain.train_on_unroll(exp, 0.5)


@pytest.mark.parametrize("bad", [(0.5, 0.5, 0.25), (0.2, 1.5, 0.25),
                                 (0.2, 0.8, 0.0), (0.2, 0.8, 1.5),
                                 (0.2, 0.25), "linear"])
def test_a_bad_explore_fraction_schedule_is_refused(bad):
    from alf.utils.errors import ConfigError
    with pytest.raises(ConfigError, match="explore_fraction_schedule"):
        _ppo(explore_fraction_schedule=bad)


def test_deterministic_offset_shifts_the_mode_within_the_box_only():
    torch.manual_seed(0)
    alg = _gaussian_ppo(deterministic_offset=(0.0, -0.5))
    plain = _gaussian_ppo()
    plain.load_state_dict(alg.state_dict())
    obs = torch.randn(200, 3)
    mode = plain.predict_step(obs).output
    shifted = alg.predict_step(obs).output
    torch.testing.assert_close(shifted[:, 0], mode[:, 0].clamp(-1, 1))
    torch.testing.assert_close(shifted[:, 1],
                               (mode[:, 1].clamp(-1, 1) - 0.5).clamp(-1, 1))
    # A Gaussian's mean beyond the box (the environment clips it) moves
    # from the edge: 3 - 0.5 acts at 0.5, not at the edge.
    beyond = _gaussian_ppo(deterministic_offset=-0.5)
    beyond.actor.load_state_dict(plain.actor.state_dict())
    beyond.actor.forward = lambda o: type("D", (), {
        "mode": lambda self: torch.full((len(o), 2), 3.0)})()
    assert torch.all(beyond.predict_step(obs).output == 0.5)
    far = _gaussian_ppo(deterministic_offset=2.0).predict_step(obs).output
    assert torch.all(far == 1.0)
    # {dimension: offset}: the others keep their mode.
    named = _gaussian_ppo(deterministic_offset={1: -0.5})
    named.load_state_dict(alg.state_dict())
    torch.testing.assert_close(named.predict_step(obs).output, shifted)
    # The training rollouts do not use it: sampled actions are the same.
    torch.manual_seed(1)
    a = alg.rollout_step(obs).output
    torch.manual_seed(1)
    torch.testing.assert_close(plain.rollout_step(obs).output, a)


@pytest.mark.parametrize("bad, message", [
    ((0.1, 0.2, 0.3), r"one per action dimension \(2\)"),
    ("fast", "one per action dimension"),
    ({2: 0.1}, r"dimensions in 0..1"),
    # The box is [-1, 1]: beyond 2 every action sits at a bound.
    ((0.1, -2.5), r"offset -2.5 for dimension 1 is not within the width of "
     r"its range \[-1, 1\] .*; valid: \|offset\| <= 2\n"),
    (float("nan"), r"offset nan for dimension 0 is not within"),
    ({0: 1e9}, r"offset 1000000000.0 for dimension 0")])
def test_a_bad_deterministic_offset_is_refused(bad, message):
    from alf.utils.errors import ConfigError
    with pytest.raises(ConfigError, match=message):
        _gaussian_ppo(deterministic_offset=bad)
    with pytest.raises(ConfigError, match="needs a one-dimensional Box"):
        _ppo(deterministic_offset=0.1)


def test_an_offset_as_wide_as_the_box_is_allowed_and_a_wider_grid_not():
    from alf.utils.errors import ConfigError
    _gaussian_ppo(deterministic_offset=(2.0, -2.0))
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4,
                        eval_deterministic=True,
                        calibrate_offsets={1: (-0.5, 2.1)})
    with pytest.raises(ConfigError, match=r"^TrainerConfig.calibrate_offsets="
                       r"\{1: \(-0.5, 2.1\)\}: offset 2.1 for dimension 1"):
        PPOAlgorithm(gym.spaces.Box(-1, 1, (3, )),
                     gym.spaces.Box(-1, 1, (2, )), cfg)
