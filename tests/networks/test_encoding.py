"""Network initialisation choices."""
import gymnasium as gym
import pytest
import torch

from alf.networks.encoding import EncodingNetwork
from alf.utils.errors import ConfigError
from alf.networks.q_network import QNetwork


def test_orthogonal_init_has_orthogonal_rows_and_zero_biases():
    torch.manual_seed(0)
    net = EncodingNetwork((8, ), (4, ), init="orthogonal")
    w = net.layers[0].weight
    assert torch.allclose(w @ w.T, 2.0 * torch.eye(4), atol=1e-5)  # gain^2
    assert not net.layers[0].bias.any()


def test_torch_init_is_pytorchs_default():
    torch.manual_seed(0)
    ours = QNetwork(gym.spaces.Box(-1, 1, (8, )), gym.spaces.Discrete(3),
                    hidden_sizes=(16, ), init="torch")
    torch.manual_seed(0)
    plain = [torch.nn.Linear(8, 16), torch.nn.Linear(16, 3)]
    for a, b in zip([ours.encoder.layers[0], ours.head], plain):
        assert torch.equal(a.weight, b.weight)
        assert torch.equal(a.bias, b.bias)


@pytest.mark.parametrize("ctor", [
    lambda: EncodingNetwork((8, ), (), init="xavier"),
    lambda: QNetwork(gym.spaces.Box(-1, 1, (8, )), gym.spaces.Discrete(3),
                     init="xavier")])
def test_unknown_init_names_the_valid_ones(ctor):
    with pytest.raises(ConfigError, match="'xavier'.*orthogonal.*torch"):
        ctor()


@pytest.mark.parametrize("ctor, name", [
    ("QNetwork", "QNetwork"), ("CriticEnsemble", "CriticEnsemble"),
    ("ValueNetwork", "ValueNetwork"),
    ("ActorDistributionNetwork", "ActorDistributionNetwork"),
    ("DisjointPolicyValueNetwork", "DisjointPolicyValueNetwork")])
@pytest.mark.parametrize("bad", [(0, ), (64, -1), (64.0, ), (True, )])
def test_a_hidden_size_below_1_is_refused_naming_the_network(ctor, name,
                                                               bad):
    """A 0 made a layer of no units (a network constant in its input)
    without a word."""
    from alf.networks.actor import ActorDistributionNetwork
    from alf.networks.policy_value import DisjointPolicyValueNetwork
    from alf.networks.q_network import CriticEnsemble
    from alf.networks.value import ValueNetwork
    cls = dict(QNetwork=QNetwork, CriticEnsemble=CriticEnsemble,
               ValueNetwork=ValueNetwork,
               ActorDistributionNetwork=ActorDistributionNetwork,
               DisjointPolicyValueNetwork=DisjointPolicyValueNetwork)[ctor]
    obs = gym.spaces.Box(-1, 1, (3, ))
    args = (obs, ) if ctor == "ValueNetwork" else (
        obs, gym.spaces.Box(-1, 1, (2, )) if ctor == "CriticEnsemble"
        else gym.spaces.Discrete(2))
    with pytest.raises(ConfigError) as info:
        cls(*args, hidden_sizes=bad)
    assert str(info.value).splitlines()[0] == (
        f"{name}.hidden_sizes={bad!r}; every layer "
                               "size must be a positive integer, e.g. "
                               "(64, 64)")


def _networks():
    from alf.networks.actor import ActorDistributionNetwork
    from alf.networks.policy_value import DisjointPolicyValueNetwork
    from alf.networks.q_network import CriticEnsemble
    from alf.networks.value import ValueNetwork
    from alf.algorithms.sac_algorithm import SquashedGaussianActor
    box = gym.spaces.Box(-1, 1, (2, ))
    return {
        "ActorDistributionNetwork": lambda o: ActorDistributionNetwork(
            o, gym.spaces.Discrete(2)),
        "DisjointPolicyValueNetwork": lambda o: DisjointPolicyValueNetwork(
            o, gym.spaces.Discrete(2)),
        "ValueNetwork": ValueNetwork,
        "QNetwork": lambda o: QNetwork(o, gym.spaces.Discrete(2)),
        "CriticEnsemble": lambda o: CriticEnsemble(o, box),
        "SquashedGaussianActor": lambda o: SquashedGaussianActor(o, box)}


@pytest.mark.parametrize("space", [
    gym.spaces.Discrete(5), gym.spaces.Box(-1, 1, ()),
    gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2, ))}),
    gym.spaces.Tuple((gym.spaces.Discrete(2), ))], ids=str)
@pytest.mark.parametrize("name", list(_networks()))
def test_an_observation_space_without_an_array_shape_is_one_line(name,
                                                                 space):
    """These used to fail inside the layers (IndexError, or gin's
    "'NoneType' object is not iterable")."""
    with pytest.raises(ConfigError) as info:
        _networks()[name](space)
    message = str(info.value).splitlines()[0]
    assert message.startswith(f"{name} takes observations that are arrays")
    assert "FlattenObservation" in message


@pytest.mark.parametrize("space", [
    gym.spaces.Box(0, 255, (4, ), dtype="uint8"),
    gym.spaces.MultiBinary(4), gym.spaces.MultiDiscrete([3, 3, 3, 3])],
    ids=str)
def test_integer_observation_spaces_build_networks(space):
    for build in _networks().values():
        build(space)


def test_conv_layers_that_do_not_fit_the_image_are_one_line():
    with pytest.raises(ConfigError, match=r"^ValueNetwork.conv_layers="
                       r"\(\(8, 8, 4\),\) do not fit an image of shape "
                       r"\(3, 16, 16\) read as \(H, W, C\), channels last"):
        from alf.networks.value import ValueNetwork
        ValueNetwork(gym.spaces.Box(0, 1, (3, 16, 16)),
                     conv_layers=((8, 8, 4), ))
