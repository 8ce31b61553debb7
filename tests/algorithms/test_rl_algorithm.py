"""`RLAlgorithm`'s one check of the action spaces an algorithm declares."""
import gymnasium as gym
import numpy as np
import pytest

from alf.algorithms import OnPolicyAlgorithm, PPOAlgorithm
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.errors import ConfigError, one_line

OBS = gym.spaces.Box(-1, 1, (3, ))


def _config(env_name="Toy-v0"):
    return TrainerConfig(algorithm_ctor=PPOAlgorithm, env_name=env_name,
                         num_envs=2, unroll_length=2, minibatch_size=4)


def _unbuildable(*args, **kwargs):
    raise AssertionError("a network was built for a refused action space")


def test_refusal_names_algorithm_environment_space_and_kinds():
    with pytest.raises(ConfigError) as info:
        PPOAlgorithm(OBS, gym.spaces.MultiDiscrete([2, 3]),
                     _config("Toy-v0"), actor_network_ctor=_unbuildable)
    # one_line: gin adds the configurable's name on a second line.
    assert one_line(info.value) == (
        "PPOAlgorithm needs a Discrete or Box action space; Toy-v0 has "
        "MultiDiscrete([2 3])")


class _Binary(OnPolicyAlgorithm):
    supported_action_spaces = (gym.spaces.MultiBinary, )
    action_space_hint = "wrap the environment"


def test_a_subclass_declares_its_own_spaces_and_hint():
    assert _Binary(OBS, gym.spaces.MultiBinary(4), _config()).action_space \
        == gym.spaces.MultiBinary(4)
    with pytest.raises(ConfigError, match=r"^_Binary needs a MultiBinary "
                       r"action space; Toy-v0 has Discrete\(2\); wrap the "
                       r"environment$"):
        _Binary(OBS, gym.spaces.Discrete(2), _config())


class _Bounded(OnPolicyAlgorithm):
    supported_action_spaces = (gym.spaces.Box, )
    needs_bounded_actions = True


def test_bounded_actions_and_a_one_line_message_for_long_bounds():
    _Bounded(OBS, gym.spaces.Box(-1, 1, (2, )), _config())
    with pytest.raises(ConfigError, match="needs a bounded Box"):
        _Bounded(OBS, gym.spaces.Box(-np.inf, np.inf, (2, )), _config())
    # numpy prints long, uneven bounds over several lines.
    low = np.linspace(-1, 0, 300, dtype=np.float32)
    with pytest.raises(ConfigError) as info:
        _Bounded(OBS, gym.spaces.Box(low, np.inf), _config())
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("algorithm, space, hint", [
    ("SACAlgorithm", gym.spaces.Discrete(3), "use DQNAlgorithm or "
     "PPOAlgorithm for discrete actions"),
    ("SACAlgorithm", gym.spaces.Box(-np.inf, np.inf, (2, )),
     "give the environment finite ones, or use PPOAlgorithm"),
    ("SACAlgorithm", gym.spaces.Tuple((gym.spaces.Discrete(2), )), None),
    ("DQNAlgorithm", gym.spaces.Box(-1, 1, (2, )), "use SACAlgorithm or "
     "PPOAlgorithm for continuous actions"),
    ("DQNAlgorithm", gym.spaces.MultiDiscrete([2, 3]), None)])
def test_the_hint_fits_the_refused_space(algorithm, space, hint):
    """SAC on an unbounded Box used to be told to use DQN, and DQN on
    MultiDiscrete to use SAC."""
    import alf.algorithms as algorithms
    cls = getattr(algorithms, algorithm)
    config = TrainerConfig(algorithm_ctor=cls, env_name="Toy-v0",
                           num_envs=2, unroll_length=2, minibatch_size=4,
                           initial_collect_steps=4,
                           replay_buffer_capacity=8)
    with pytest.raises(ConfigError) as info:
        cls._check_action_space(space, config)
    message = one_line(info.value)
    assert message.startswith(f"{algorithm} needs a ")
    if hint is None:
        assert message.endswith(" ".join(str(space).split()))
    else:
        assert message.endswith(hint)


@pytest.mark.parametrize("algorithm", ["PPOAlgorithm", "SACAlgorithm"])
def test_a_box_action_of_more_than_one_dimension_is_one_line(algorithm):
    """It used to fail in the environment's clip (PPO: "operands could not
    be broadcast") or in the critics (SAC)."""
    import alf.algorithms as algorithms
    cls = getattr(algorithms, algorithm)
    with pytest.raises(ConfigError) as info:
        cls._check_action_space(gym.spaces.Box(-1, 1, (2, 2)), _config())
    assert one_line(info.value).startswith(
        f"{algorithm} acts in one-dimensional Box spaces; Toy-v0 has Box(")
    assert one_line(info.value).endswith("reshapes it to (2, 2)")


class _Shaped(OnPolicyAlgorithm):
    flat_box_actions = False  # its own networks act in the Box's shape


def test_a_subclass_acting_in_the_boxs_shape_declares_it():
    _Shaped._check_action_space(gym.spaces.Box(-1, 1, (2, 2)), _config())


def test_integer_observations_are_float32_for_the_networks_and_replay():
    """A uint8 image or an integer vector used to fail in the first layer
    ("mat1 and mat2 must have the same dtype")."""
    import torch
    from alf.algorithms import SACAlgorithm
    space = gym.spaces.Box(0, 255, (3, ), dtype=np.uint8)
    ppo = PPOAlgorithm(space, gym.spaces.Discrete(2), _config(),
                       normalize_observations=True)
    raw = torch.tensor([[0, 128, 255], [1, 2, 3]], dtype=torch.uint8)
    obs = ppo.observe(raw)
    assert obs.dtype == torch.float32
    ppo.actor(obs)
    config = TrainerConfig(algorithm_ctor=SACAlgorithm, num_envs=2,
                           unroll_length=1, minibatch_size=4,
                           initial_collect_steps=4, replay_buffer_capacity=8)
    sac = SACAlgorithm(space, gym.spaces.Box(-1, 1, (1, )),
                       config.per_rank(1))
    assert sac.example_experience(2).observation.dtype == torch.float32


def test_observe_gives_float32_for_float64_and_for_a_nest():
    """A suite's float64 tensors failed in the first layer, and a Dict
    space's observations (an algorithm of one's own) in ``.to``."""
    import torch
    alg = _Binary(OBS, gym.spaces.MultiBinary(4), _config())
    assert alg.observe(torch.zeros(2, 3, dtype=torch.float64)).dtype == \
        torch.float32
    got = alg.observe({"a": torch.zeros(2, 3, dtype=torch.uint8),
                       "b": torch.zeros(2, dtype=torch.int64)})
    assert {k: v.dtype for k, v in got.items()} == {
        "a": torch.float32, "b": torch.float32}


def test_a_box_dimension_of_no_width_is_refused_where_squashed():
    """SAC's loss went non-finite at its first update ("non-finite
    SACAlgorithm loss at iteration 128"), with nothing to say why."""
    from alf.algorithms import SACAlgorithm
    from alf.networks.actor import ActorDistributionNetwork
    fixed = gym.spaces.Box(np.array([0.0, 2.0], np.float32),
                           np.array([1.0, 2.0], np.float32))
    with pytest.raises(ConfigError) as info:
        SACAlgorithm._check_action_space(fixed, _config())
    assert one_line(info.value).startswith(
        "SACAlgorithm needs low < high in every dimension of its Box; "
        "Toy-v0 has Box(")
    assert "whose dimension(s) 1 have no width" in one_line(info.value)
    for kw in ({"squash": True}, {"beta": True}):
        with pytest.raises(ConfigError, match="needs low < high"):
            ActorDistributionNetwork(OBS, fixed, **kw)
    ActorDistributionNetwork(OBS, fixed)  # clipped: a constant dimension
