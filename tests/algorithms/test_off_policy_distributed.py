"""Off-policy training on 2 real gloo ranks: replay buffers stay per rank,
target networks stay equal, and global prioritized replay trains."""
import pytest
import torch

from distributed_harness import run_ranks, values


def _train_sac(rank, replay, iterations):
    import gymnasium as gym

    from alf import replay_buffers
    from alf.algorithms.sac_algorithm import SACAlgorithm
    from alf.data_structures import Experience
    from alf.trainers.trainer_config import TrainerConfig
    from alf.utils import distributed

    cfg = TrainerConfig(algorithm_ctor=SACAlgorithm, num_envs=4,
                        unroll_length=2, minibatch_size=16,
                        initial_collect_steps=8, replay_buffer_capacity=64,
                        num_updates_per_iter=3).per_rank(2)
    torch.manual_seed(0)  # equal initial weights, as the trainer does
    alg = SACAlgorithm(gym.spaces.Box(-1, 1, (3, )),
                       gym.spaces.Box(-1, 1, (1, )), cfg,
                       replay=getattr(replay_buffers, replay)(),
                       tau=0.05)
    distributed.activate_ddp(alg)
    torch.manual_seed(100 + rank)  # per-rank experience and sampling
    for _ in range(iterations):
        for _ in range(cfg.unroll_length):
            obs = torch.randn(2, 3)
            with torch.inference_mode():  # as the trainer's unroll
                action = alg.rollout_step(obs).output
            alg.store(Experience(obs, action, obs.sum(1),
                                 torch.zeros(2, dtype=bool),
                                 torch.zeros(2, dtype=bool),
                                 torch.randn(2, 3)))
        alg.train_iter(0.5)
    distributed.check_weights_equal(alg)  # raises on any drift
    return ({k: v.clone() for k, v in alg.target_critics.state_dict().items()},
            alg.replay_buffer.gather_all().observation.clone(),
            [p.clone() for p in alg.actor.parameters()],
            {k: v.clone() for k, v in alg.critics.state_dict().items()})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replay", ["UniformReplay",
                                    "PrioritizedGlobalReplay"])
def test_sac_targets_equal_and_replay_per_rank(replay):
    r0, r1 = values(run_ranks(_train_sac, replay, 20, timeout=100))
    for name in r0[0]:
        assert torch.equal(r0[0][name], r1[0][name]), name
    # Trained: targets moved away from their initial copy of the critics,
    # and every actor parameter is equal across ranks.
    for a, b in zip(r0[2], r1[2]):
        assert torch.equal(a, b)
    assert any(not torch.equal(r0[0][k], r0[3][k]) for k in r0[0])
    # Each rank keeps its own experience.
    assert r0[1].shape == r1[1].shape
    assert not torch.equal(r0[1], r1[1])
