"""PPO: the loss against a hand computation, and a short learning run."""
import dataclasses
import math

import gymnasium as gym
import pytest
import torch

from alf.algorithms.ppo_algorithm import PPOAlgorithm, PPOBatch, PPOTrainInfo
from alf.trainers import Trainer
from alf.trainers.trainer_config import TrainerConfig


def _ppo(**kw):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=2, mini_batch_size=4)
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


@pytest.mark.timeout(120)
def test_ppo_learns_cart_pole(tmp_path):
    """A short run (15k env steps) clearly beats a random policy (~22)."""
    import gin
    import alf.config
    alf.config.parse_config(["ppo_cart_pole.gin"], [
        "TrainerConfig.num_env_steps=15360", "TrainerConfig.eval_interval=0",
        "TrainerConfig.seed=1"
    ])
    try:
        metrics = Trainer(str(tmp_path)).train()
    finally:
        gin.clear_config()
    assert metrics["average_return"] > 150, metrics


@pytest.mark.parametrize("world", [1, 2])
def test_mini_batch_larger_than_the_unroll_is_refused(monkeypatch, world):
    from alf.utils import distributed
    from alf.utils.errors import ConfigError
    monkeypatch.setattr(distributed, "get_world_size", lambda: world)
    # A rank's config (per_rank itself refuses it: test_trainer_config).
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=4 // world,
                        unroll_length=8, mini_batch_size=64 // world)
    with pytest.raises(ConfigError) as info:
        PPOAlgorithm(gym.spaces.Box(-1, 1, (2, )), gym.spaces.Discrete(2),
                     cfg)
    msg = str(info.value).splitlines()[0]
    assert msg.startswith("TrainerConfig.mini_batch_size=64 is more than the "
                          "32 transitions of one iteration (num_envs=4 x "
                          "unroll_length=8)"), msg
    assert msg.endswith("use at most 32")
    assert ("per process, 32 of 16" in msg) == (world == 2)
    PPOAlgorithm(gym.spaces.Box(-1, 1, (2, )), gym.spaces.Discrete(2),
                 dataclasses.replace(cfg, mini_batch_size=32 // world))
