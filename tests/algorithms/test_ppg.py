"""PPG: the auxiliary-phase loss by hand, the phase schedule, and 2 ranks
through auxiliary phases staying equal (and equal to one process)."""
import gin
import gymnasium as gym
import pytest
import torch

from alf import nest
from alf.algorithms.ppg_algorithm import AuxBatch, PPGAlgorithm
from alf.algorithms.ppo_algorithm import PPOAlgorithm, PPOBatch
from alf.data_structures import Experience
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import distributed
from alf.utils.distributed import activate_ddp
from distributed_harness import run_ranks, values

T, B, OBS = 8, 4, 3
OBS_SPACE = gym.spaces.Box(-10, 10, (OBS, ))


def _ppg(world_size=1, aux_interval=2, **kw):
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B,
                        num_epochs=2).per_rank(world_size)
    torch.manual_seed(0)
    return PPGAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg,
                        aux_interval=aux_interval, aux_epochs=2,
                        aux_minibatch_size=aux_interval * T * B, **kw)


def test_aux_loss_matches_hand_computation():
    alg = _ppg(clone_coef=0.7)
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(5, OBS, generator=g)
    returns = torch.randn(5, generator=g)
    old_logits = torch.randn(5, 3, generator=g)
    old = torch.log_softmax(old_logits, -1)
    loss = alf_loss = alg.aux_minibatch_loss(AuxBatch(obs, returns, (old, )))

    # By hand: run the layers explicitly, then the formulas of the paper.
    h = obs
    for layer in alg.actor.actor.encoder.layers:
        h = torch.tanh(h @ layer.weight.T + layer.bias)
    logits = h @ alg.actor.actor.head.weight.T + alg.actor.actor.head.bias
    aux_v = (h @ alg.actor.aux_value_head.weight.T +
             alg.actor.aux_value_head.bias).squeeze(-1)
    v = alg.value_net(obs)
    p_old = old.exp()
    log_p_new = logits - logits.logsumexp(-1, keepdim=True)
    kl = (p_old * (old - log_p_new)).sum(-1).mean()
    expected = (0.5 * ((aux_v - returns)**2).mean() + 0.7 * kl +
                0.5 * ((v - returns)**2).mean())
    assert torch.allclose(alf_loss.loss, expected, atol=1e-6)
    assert torch.allclose(loss.extra["kl"], kl, atol=1e-6)
    assert kl > 0.01  # the KL term is really exercised
    # Gradients reach the auxiliary head, the policy and the value network.
    alf_loss.loss.backward()
    for p in (alg.actor.aux_value_head.weight, alg.actor.actor.head.weight,
              alg.value_net.head.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_kl_term_is_zero_against_the_current_policy():
    alg = _ppg()
    obs = torch.randn(6, OBS)
    with torch.no_grad():
        old = alg.actor(obs).params()
    loss = alg.aux_minibatch_loss(AuxBatch(obs, torch.zeros(6), old))
    assert abs(loss.extra["kl"].item()) < 1e-6


def _unrolls(n):
    g = torch.Generator().manual_seed(7)
    out = []
    for _ in range(n):
        raw = torch.randn(T + 1, B, OBS, generator=g)
        out.append(Experience(
            observation=raw[:-1],
            action=torch.randint(0, 3, (T, B), generator=g),
            reward=torch.rand(T, B, generator=g),
            terminated=torch.rand(T, B, generator=g) < 0.1,
            truncated=torch.zeros(T, B, dtype=torch.bool),
            next_observation=raw[1:], rollout_info=torch.full((T, B), -1.1)))
    return out


def _train_ppg(rank, world_size, iterations=4, find_unused=True):
    gin.bind_parameter("make_ddp_performer.find_unused_parameters",
                       find_unused)
    alg = _ppg(world_size)
    activate_ddp(alg)
    cols = slice(rank * B // world_size, (rank + 1) * B // world_size)
    aux_phases = 0
    for exp in _unrolls(iterations):
        for t in range(T):
            alg.store(nest.map_structure(lambda x: x[t, cols], exp))
        stats = alg.train_iter(0.0)
        aux_phases += "aux/kl" in stats
    distributed.check_weights_equal(alg)
    return aux_phases, {n: t.clone() for n, t in
                        distributed.synced_state(alg)}


def test_aux_phase_runs_every_aux_interval_iterations():
    phases, _ = _train_ppg(0, 1, iterations=5)
    assert phases == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("find_unused", [True, "auto"])
def test_two_ranks_through_aux_phases_equal_one_process(find_unused):
    """'auto' (the default) keeps the search the policy phase needs on
    through the auxiliary phase, which uses every parameter."""
    phases, single = _train_ppg(0, 1)
    ranks = values(run_ranks(_train_ppg, 2, 4, find_unused))
    assert phases == 2 and all(r[0] == 2 for r in ranks)
    for name, ref in single.items():
        for _, state in ranks:
            diff = (state[name] - ref).abs().max().item()
            assert diff <= 1e-5, f"{name}: {diff}"
    # The auxiliary head was trained (and identically on both ranks).
    w = "actor.aux_value_head.weight"
    assert not torch.allclose(_ppg().state_dict()[w], single[w])


def test_ppo_parameters_unset_on_ppg_keep_ppo_bindings():
    # PPG lists PPO's parameters (so gin refuses typos) but passes on only
    # those given: PPOAlgorithm's own bindings still apply to the rest.
    import alf.trainers
    alf.trainers.parse_config(["ppg_cart_pole.gin"], [
        "PPOAlgorithm.gamma=0.5", "PPOAlgorithm.learning_rate=2e-3",
        "PPGAlgorithm.learning_rate=7e-4"])
    try:
        cfg = TrainerConfig(num_envs=B, unroll_length=T,
                            minibatch_size=T * B)
        alg = cfg.algorithm_ctor(observation_space=OBS_SPACE,
                                 action_space=gym.spaces.Discrete(3),
                                 config=cfg)
    finally:
        gin.clear_config()
    assert alg._gamma == 0.5  # PPOAlgorithm's binding
    assert alg._lambda == 0.8  # ppo_cart_pole.gin's, included by PPG's file
    assert alg._lr == 7e-4  # PPGAlgorithm's binding wins over PPO's


def test_ppo_numbers_given_to_ppg_are_refused_by_ppgs_name():
    from alf.utils.errors import ConfigError
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B)
    with pytest.raises(ConfigError) as info:
        PPGAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg, gamma=1.01)
    assert str(info.value).splitlines()[0] == (
        "PPGAlgorithm.gamma=1.01; valid: a number in [0, 1]")


@pytest.mark.parametrize("name, bad, valid", [
    ("aux_interval", 0, "an integer >= 1"),
    ("aux_interval", 2.5, "an integer >= 1"),
    ("aux_epochs", 0, "an integer >= 1"),  # stacked no statistics
    ("aux_epochs", -1, "an integer >= 1"),
    ("aux_minibatch_size", -4, "an integer >= 1"),
    ("aux_minibatch_size", True, "an integer >= 1"),
    ("clone_coef", -1.0, "a number >= 0")])
def test_ppg_settings_out_of_range_are_refused(name, bad, valid):
    """They trained without a word (a negative cloning coefficient pushing
    the policy away from itself), or failed in the first auxiliary phase."""
    from alf.utils.errors import ConfigError
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B)
    with pytest.raises(ConfigError) as info:
        PPGAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg, **{name: bad})
    assert str(info.value).splitlines()[0] == (
        f"PPGAlgorithm.{name}={bad!r}; valid: {valid}")


def test_aux_minibatch_larger_than_the_aux_phase_is_refused():
    from alf.utils.errors import ConfigError
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B)
    with pytest.raises(ConfigError) as info:
        PPGAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg, aux_interval=2,
                     aux_minibatch_size=2 * T * B + 1)
    msg = str(info.value).splitlines()[0]
    assert msg == (f"PPGAlgorithm.aux_minibatch_size={2 * T * B + 1} is "
                   f"more than the {2 * T * B} transitions of an auxiliary "
                   f"phase (aux_interval=2 x num_envs={B} x unroll_length="
                   f"{T}); use at most {2 * T * B}")


@pytest.mark.parametrize("steps, said", [(T * B, True),
                                          (T * B + 1, False),
                                          (2 * T * B, False)])
def test_an_aux_interval_longer_than_the_run_is_named(steps, said):
    """A run shorter than aux_interval never ran an auxiliary phase,
    without a word."""
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B,
                        num_env_steps=steps)
    alg = PPGAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg, aux_interval=2)
    # Two iterations, a part one included, reach one auxiliary phase.
    assert alg.idle_settings(cfg) == ([
        f"PPGAlgorithm.aux_interval=2 exceeds the run's length in "
        f"iterations, 1 (num_env_steps={steps} at {T * B} per "
        "iteration): no auxiliary phase will run, so it trains as PPO; use "
        "aux_interval <= 1 for one"]
        if said else [])
    assert PPOAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg
                        ).idle_settings(cfg) == []


def test_aux_mini_batch_size_still_works_and_warns_once(monkeypatch, caplog):
    import logging
    import alf.trainers
    from alf.utils import deprecation
    monkeypatch.setattr(deprecation, "_warned", set())
    caplog.set_level(logging.WARNING)
    alf.trainers.parse_config([], [
        "TrainerConfig.algorithm_ctor = @PPGAlgorithm",
        "PPGAlgorithm.aux_mini_batch_size = 64"])
    try:
        cfg = TrainerConfig(num_envs=B, unroll_length=T,
                            minibatch_size=T * B)
        for world_size in (1, 2):
            alg = cfg.algorithm_ctor(observation_space=OBS_SPACE,
                                     action_space=gym.spaces.Discrete(3),
                                     config=cfg.per_rank(world_size))
            assert alg._local_aux_minibatch_size == 64 // world_size
    finally:
        gin.clear_config()
    assert [r.getMessage() for r in caplog.records
            if "deprecated" in r.getMessage()] == [
        "PPGAlgorithm.aux_mini_batch_size is deprecated; use "
        "PPGAlgorithm.aux_minibatch_size"]


def test_aux_minibatch_size_in_both_spellings_is_refused():
    from alf.utils.errors import ConfigError, one_line
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B)
    with pytest.raises(ConfigError) as info:
        PPGAlgorithm(OBS_SPACE, gym.spaces.Discrete(3), cfg,
                     aux_minibatch_size=32, aux_mini_batch_size=64)
    assert one_line(info.value) == (
        "PPGAlgorithm.aux_mini_batch_size and its new spelling "
        "PPGAlgorithm.aux_minibatch_size are both set; keep only the new one")


# ---- uneven batches: rank 0 collects 3 steps, rank 1 5, per iteration ------
STEPS = (3, 5)


def _rank_unrolls(rank):
    cols = slice(rank * B // 2, (rank + 1) * B // 2)
    return [nest.map_structure(lambda x: x[:STEPS[rank], cols], exp)
            for exp in _unrolls(2)]


def _train_ppg_uneven(rank, world_size):
    gin.bind_parameter("make_ddp_performer.find_unused_parameters", True)
    alg = _ppg(world_size, uneven_batches=True)
    activate_ddp(alg)
    phases = 0
    for exp in _rank_unrolls(rank):
        for t in range(exp.reward.shape[0]):
            alg.store(nest.map_structure(lambda x: x[t], exp))
        phases += "aux/kl" in alg.train_iter(0.0)
    return phases, {n: t.clone() for n, t in distributed.synced_state(alg)}


def test_uneven_batches_through_an_aux_phase_equal_one_process():
    """Two policy phases and one auxiliary phase on ranks holding 6 and 10
    samples per iteration == one process on the union of them."""
    alg = _ppg(1, uneven_batches=True)
    parts = [_rank_unrolls(r) for r in range(2)]
    for i in range(2):
        # Each rank's GAE on its own steps; the union trained at once.
        batches = [PPOAlgorithm._prepare_batch(alg, p[i]) for p in parts]
        union = PPOBatch(*[torch.cat(x) for x in zip(*batches)])
        alg._store_aux(union.observation, union.returns)
        alg.train_on_batch(union)
    alg._auxiliary_phase()
    ref = {n: t.clone() for n, t in distributed.synced_state(alg)}
    ranks = values(run_ranks(_train_ppg_uneven, 2))
    assert all(phases == 1 for phases, _ in ranks)
    for name, r in ref.items():
        for _, state in ranks:
            diff = (state[name].double() - r.double()).abs().max().item()
            assert diff <= 1e-5, f"{name}: max abs diff {diff}"
    w = "actor.aux_value_head.weight"
    assert not torch.allclose(_ppg().state_dict()[w], ref[w])


def test_the_log_std_bound_holds_after_the_auxiliary_phase(monkeypatch):
    """The clone loss moves the log std too; PPG clamps again after it."""
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B, num_epochs=1)
    # PPG takes PPO's settings from PPO's bindings, as its gin files do.
    with gin.unlock_config():
        gin.bind_parameter("PPOAlgorithm.log_std_bound", (0.0, -1.0))
    try:
        alg = PPGAlgorithm(OBS_SPACE, gym.spaces.Box(-1, 1, (2, )), cfg,
                           aux_interval=1, aux_epochs=1,
                           aux_minibatch_size=T * B)
    finally:
        gin.clear_config()
    log_std, = [p for n, p in alg.named_parameters() if n.endswith("log_std")]
    real = alg._auxiliary_phase

    def raising():
        out = real()
        with torch.no_grad():
            log_std.fill_(3.0)
        return out

    monkeypatch.setattr(alg, "_auxiliary_phase", raising)
    exp = _unrolls(1)[0]._replace(action=torch.rand(T, B, 2) * 2 - 1)
    for t in range(T):
        alg.store(nest.map_structure(lambda x: x[t], exp))
    stats = alg.train_iter(0.5)
    assert "aux/kl" in stats
    assert log_std.tolist() == [-0.5, -0.5]


def test_a_beta_policy_goes_through_both_phases():
    """A Beta policy's parameters rebuild it for the clone term (zero KL
    against itself) and a policy and an auxiliary phase move it."""
    import functools

    from alf.networks.distributions import Beta
    from alf.networks.policy_value import DisjointPolicyValueNetwork
    cfg = TrainerConfig(algorithm_ctor=PPGAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B, num_epochs=2)
    torch.manual_seed(0)
    alg = PPGAlgorithm(OBS_SPACE, gym.spaces.Box(-1, 1, (2, )), cfg,
                       actor_network_ctor=functools.partial(
                           DisjointPolicyValueNetwork, beta=True),
                       aux_interval=1, aux_epochs=1,
                       aux_minibatch_size=T * B)
    obs = torch.randn(6, OBS)
    with torch.no_grad():
        dist = alg.actor(obs)
        old = dist.params()
    assert isinstance(dist, Beta)
    loss = alg.aux_minibatch_loss(AuxBatch(obs, torch.zeros(6), old))
    assert abs(loss.extra["kl"].item()) < 1e-6
    exp = _unrolls(1)[0]
    with torch.no_grad():
        flat = exp.observation.flatten(0, 1)
        step = alg.rollout_step(flat)
    exp = exp._replace(action=step.output.view(T, B, 2),
                       rollout_info=step.info.view(T, B))
    assert ((exp.action >= -1) & (exp.action <= 1)).all()
    for t in range(T):
        alg.store(nest.map_structure(lambda x: x[t], exp))
    stats = alg.train_iter(0.5)
    assert "aux/kl" in stats and torch.isfinite(stats["aux/kl"])
    with torch.no_grad():
        moved = alg.actor(obs)
    assert not torch.allclose(moved.alpha, dist.alpha)


def test_the_policy_is_ready_before_the_auxiliary_phase():
    """`policy_ready` is called once per auxiliary phase, after the policy
    phase and before the auxiliary one (which then moves the policy)."""
    alg = _ppg(aux_interval=2)
    calls = []
    alg.policy_ready = lambda: calls.append(
        [p.clone() for p in alg.actor.parameters()])
    for i, exp in enumerate(_unrolls(4)):
        for t in range(T):
            alg.store(nest.map_structure(lambda x: x[t], exp))
        before = len(calls)
        stats = alg.train_iter(0.0)
        assert len(calls) - before == ("aux/kl" in stats), i
        if "aux/kl" in stats:  # ready weights: the policy phase's alone
            assert any(not torch.equal(a, b) for a, b in
                       zip(calls[-1], alg.actor.parameters()))
    assert len(calls) == 2


def test_steps_acted_before_the_auxiliary_phase_measure_kl_from_its_end():
    """Actors got the policy phase's weights (`policy_ready`), labelled
    with the next version, before the auxiliary phase moved them: target_kl
    must measure the next iteration's updates from the weights the learner
    starts it with, not from those acting weights, while the ratio keeps
    the behaviour log-probability."""
    alg = _ppg(aux_interval=2)
    ready = []
    alg.policy_ready = lambda: ready.append(alg.policy_version + 1)

    def with_version(exp, version):
        return exp._replace(policy_version=torch.full((T, B), version))

    unrolls = _unrolls(4)
    for version, exp in enumerate(unrolls[:2]):
        alg.policy_version = version
        for t in range(T):
            alg.store(nest.map_structure(lambda x: x[t],
                                         with_version(exp, version)))
        alg.train_iter(0.0)
    assert ready == [2]  # one auxiliary phase, after unroll 1's policy phase
    alg.policy_version = 2
    batch = alg._prepare_batch(with_version(unrolls[2], 2))
    with torch.no_grad():
        now = alg.actor(batch.observation).log_prob(batch.action)
    torch.testing.assert_close(batch.start_log_prob, now)
    assert torch.all(batch.log_prob == -1.1)  # the behaviour's, kept
    alg.policy_version = 3  # a version no auxiliary phase moved
    batch = alg._prepare_batch(with_version(unrolls[3], 3))
    assert torch.all(batch.start_log_prob == -1.1)
