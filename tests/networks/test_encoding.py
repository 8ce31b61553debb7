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
