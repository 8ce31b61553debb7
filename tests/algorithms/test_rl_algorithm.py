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
