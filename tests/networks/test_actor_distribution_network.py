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


@pytest.mark.parametrize("kw", [{}, {"gsde_interval": 4}])
def test_a_gaussian_starts_at_the_centre_of_its_box(kw):
    """In [0, 1] x [5, 6] the mean started at 0: every sample of the second
    dimension was clipped to 5, and PPO never learned it."""
    import numpy as np
    torch.manual_seed(0)
    inf = np.inf
    box = gym.spaces.Box(
        np.array([0.0, 5.0, -inf, 5.0, -inf, -2.0], np.float32),
        np.array([1.0, 6.0, inf, inf, -5.0, inf], np.float32))
    net = ActorDistributionNetwork(OBS, box, hidden_sizes=(8, ),
                                   init_log_std=np.log(2.0), **kw)
    obs = torch.rand(64, 3) * 2 - 1
    mode = net(obs).mode()
    # Half-bounded: one initial std (2) inside the bound; 0 if inside.
    torch.testing.assert_close(
        mode.mean(0), torch.tensor([0.5, 5.5, 0.0, 7.0, -7.0, 0.0]),
        atol=0.05, rtol=0)
    # Symmetric boxes keep their state dicts (and checkpoints) as they were.
    plain = ActorDistributionNetwork(OBS, gym.spaces.Box(-2, 2, (2, )),
                                     hidden_sizes=(8, ), **kw)
    assert "action_center" not in plain.state_dict()
    # A checkpoint saved before the centre was kept loads, and acts as it
    # did then: its head learned the mean alone.
    state = net.state_dict()
    del state["action_center"]
    net.load_state_dict(state)
    with torch.no_grad():
        head_alone = net.head(net.encoder(obs))
    torch.testing.assert_close(net(obs).mode(), head_alone)
    # A bound standing for "unbounded" (float32's largest) is no centre.
    huge = gym.spaces.Box(0, np.finfo(np.float32).max, (1, ))
    assert "action_center" not in ActorDistributionNetwork(
        OBS, huge, hidden_sizes=(8, ), **kw).state_dict()
