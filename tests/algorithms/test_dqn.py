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


def test_a_copy_loaded_to_act_samples_as_the_run_did_then():
    """``alf.bin.play --sampling`` used to act at random (the initial
    collection's policy, epsilon 1) where the run's evaluation had sampled
    with its trained epsilon."""
    config = _config(initial_collect_steps=8, num_env_steps=1000)
    alg = DQNAlgorithm(OBS, gym.spaces.Discrete(3), config,
                       epsilon_start=1.0, epsilon_final=0.0,
                       exploration_fraction=0.5)
    with torch.no_grad():  # a policy whose greedy action is always 2
        alg.q_net.head.bias.copy_(torch.tensor([0.0, 0.0, 100.0]))
    alg.act_as_trained(600)  # past the initial collection and the schedule
    assert alg.epsilon() == 0.0
    assert set(alg.rollout_step(torch.zeros(64, 3)).output.tolist()) == {2}
    early = DQNAlgorithm(OBS, gym.spaces.Discrete(3), config)
    early.act_as_trained(4)  # still collecting at random then
    assert not early.ready() and early._num_stored == 4


def test_prioritized_options_bound_beside_another_replay_are_named():
    """PrioritizedReplay.alpha, where the deprecated priority_alpha's
    refusal sends a user, trained uniformly without a word when replay was
    left at its default."""
    import gin

    from alf.replay_buffers import PrioritizedReplay
    with gin.unlock_config():
        gin.bind_parameter("PrioritizedReplay.alpha", 0.5)
    try:
        said = _dqn().idle_settings(_config())
        assert said == [
            "PrioritizedReplay.alpha=0.5 does nothing: DQNAlgorithm replays "
            "with UniformReplay; bind DQNAlgorithm.replay = "
            "@PrioritizedReplay() for it"]
        assert _dqn(replay=PrioritizedReplay()).idle_settings(
            _config()) == []
    finally:
        gin.clear_config()


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


# ---- settings refused when built ---------------------------------------------
@pytest.mark.parametrize("name,value,valid", [
    ("gamma", -0.1, "a number in [0, 1]"),
    ("gamma", 1.5, "a number in [0, 1]"),
    ("gamma", float("nan"), "a number in [0, 1]"),
    ("gamma", "0.9", "a number in [0, 1]"),
    ("target_update_tau", 0.0, "a number in (0, 1]"),
    ("target_update_tau", 1.5, "a number in (0, 1]"),
    ("target_update_tau", -0.5, "a number in (0, 1]"),
    ("epsilon_start", 1.1, "a number in [0, 1]"),
    ("epsilon_start", -0.1, "a number in [0, 1]"),
    ("epsilon_final", -0.01, "a number in [0, 1]"),
    ("epsilon_final", 2, "a number in [0, 1]"),
    ("exploration_fraction", -0.5, "a number in [0, 1]"),
    ("exploration_fraction", 1.5, "a number in [0, 1]"),
    ("epsilon_eval", 1.5, "a number in [0, 1]"),
    ("epsilon_eval", True, "a number in [0, 1]"),
    ("adam_eps", -1e-8, "a number >= 0"),
])
def test_bad_setting_is_one_line_naming_it_and_the_range(name, value, valid):
    from alf.utils.errors import one_line
    with pytest.raises(ConfigError) as info:
        _dqn(**{name: value})
    assert one_line(info.value) == (f"DQNAlgorithm.{name}={value!r}; "
                                    f"valid: {valid}")


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "10"])
def test_bad_target_update_period_is_refused(value):
    # 0 was a ZeroDivisionError at the first update.
    with pytest.raises(ConfigError, match=(
            rf"^DQNAlgorithm\.target_update_period={value!r}; valid: a "
            "positive integer")):
        _dqn(target_update_period=value)


def test_settings_at_the_ends_of_their_ranges_are_accepted():
    alg = _dqn(gamma=1.0, target_update_tau=1.0, target_update_period=1,
               epsilon_start=0.0, epsilon_final=1.0,
               exploration_fraction=0.0, epsilon_eval=1.0, adam_eps=0.0)
    assert alg.epsilon() == 1.0  # fraction 0: the final epsilon at once
    _dqn(gamma=0.0, exploration_fraction=1.0, target_update_tau=1e-3)


@pytest.mark.parametrize("steps", [768, 992])
def test_a_run_that_ends_before_its_first_update_is_refused(steps):
    # 768 used to finish with exit 0, checkpoints and no update.
    with pytest.raises(ConfigError) as info:
        DQNAlgorithm(OBS, gym.spaces.Discrete(3), _config(
            num_env_steps=steps, initial_collect_steps=1000,
            replay_buffer_capacity=2000))
    assert str(info.value).splitlines()[0] == (
        f"TrainerConfig.num_env_steps={steps} ({steps} in whole "
        "iterations) ends before the first update, which waits for "
        "initial_collect_steps=1000 (random env steps of all processes "
        "together) and one minibatch (4); raise num_env_steps or lower "
        "initial_collect_steps")


@pytest.mark.parametrize("steps", [993, 1000])
def test_a_run_that_reaches_its_first_update_is_accepted(steps):
    # Iterations of 8 env steps: 993 runs 1000, the first update's.
    DQNAlgorithm(OBS, gym.spaces.Discrete(3), _config(
        num_env_steps=steps, initial_collect_steps=1000,
        replay_buffer_capacity=2000))


def _store(alg, steps):
    g = torch.Generator().manual_seed(2)
    for _ in range(steps):
        obs = torch.randn(2, 3, generator=g)
        alg.store(Experience(obs, torch.tensor([0, 1]), torch.ones(2),
                             torch.zeros(2, dtype=torch.bool),
                             torch.zeros(2, dtype=torch.bool),
                             torch.randn(2, 3, generator=g)))


@pytest.mark.parametrize("replay", ["PrioritizedReplay",
                                    "PrioritizedGlobalReplay",
                                    "UniformReplay"])
def test_non_finite_loss_is_the_same_training_error_with_any_replay(replay):
    # With prioritized replay it was update_priorities' ValueError (a
    # traceback, and retried by --max_restarts).
    import alf.replay_buffers as replay_buffers
    from alf.utils.errors import TrainingError
    alg = _dqn(replay=getattr(replay_buffers, replay)())
    _store(alg, 4)
    with torch.no_grad():
        for p in alg.q_net.parameters():
            p.fill_(float("nan"))
    with pytest.raises(TrainingError) as info:
        alg.train_iter(0.5)
    assert str(info.value) == "non-finite DQNAlgorithm loss"
    # Priorities stay as they were: no NaN reached the sum tree.
    tree = getattr(alg.replay_buffer, "sum_tree", None)
    assert tree is None or bool(torch.isfinite(tree.total()))
