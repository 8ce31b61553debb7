"""`ActorDistributionNetwork`'s parameters as DDP needs them."""
import gymnasium as gym
import pytest
import torch

from alf.networks.actor import ActorDistributionNetwork

OBS = gym.spaces.Box(-1, 1, (3, ))


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("kw", [{}, {"gsde_interval": 4},
                                {"init_log_std": [-0.5]}])
def test_every_parameter_has_row_major_strides(dims, kw):
    """DDP lays gradients out in row-major buckets: a parameter with other
    strides (an expanded size-1 dimension's 0) makes every backward warn
    "Grad strides do not match bucket view strides" (Pendulum's 1-D
    action did, under 2 processes)."""
    if "init_log_std" in kw:
        kw = {"init_log_std": kw["init_log_std"] * dims}
    net = ActorDistributionNetwork(
        OBS, gym.spaces.Box(-1, 1, (dims, )), hidden_sizes=(8, ), **kw)
    for name, p in net.named_parameters():
        assert p.stride() == torch.empty(p.shape).stride(), (name, p.stride())
