"""What travels to and from actor processes: the wire format and the
acting state."""
import gymnasium as gym
import pytest
import torch

from alf.algorithms.dqn_algorithm import DQNAlgorithm
from alf.algorithms.ppg_algorithm import PPGAlgorithm
from alf.algorithms.sac_algorithm import SACAlgorithm
from alf.data_structures import Experience
from alf.trainers.actor import decode, encode
from alf.trainers.trainer_config import TrainerConfig


def test_encode_decode_round_trips_nested_tensors_of_every_dtype():
    exp = Experience(*[(torch.arange(6) % 4).reshape(2, 3).to(d) for d in (
        torch.float32, torch.int64, torch.float64, torch.bool, torch.bool,
        torch.float32, torch.int32, torch.int64)])
    message = ("unroll", 7, exp, {"route": torch.full((2, ), 0.5)}, None,
               (1.0, 2.0), [torch.ones(1, dtype=torch.float16)])
    back = decode(encode(message))
    assert back[:2] == ("unroll", 7) and back[4] is None
    assert type(back[2]) is Experience and back[5] == (1.0, 2.0)
    for a, b in zip(exp, back[2]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(back[3]["route"], message[3]["route"])
    assert back[6][0].dtype == torch.float16
    back[2].reward.add_(1)  # decoded tensors are the receiver's own
    assert exp.reward[0, 0] == 0


def _make(cls, env_name):
    env = gym.make(env_name)
    return cls(observation_space=env.observation_space,
               action_space=env.action_space,
               config=TrainerConfig(algorithm_ctor=cls, env_name=env_name,
                                    num_envs=2))


@pytest.mark.parametrize("cls,env_name,left_out", [
    (SACAlgorithm, "Pendulum-v1", ("critics.", "target_critics.")),
    (DQNAlgorithm, "CartPole-v1", ("target_q_net.", )),
    (PPGAlgorithm, "CartPole-v1", ("value_net.", )),
])
def test_an_actor_copy_acts_like_the_learner_from_its_acting_state(
        cls, env_name, left_out):
    torch.manual_seed(0)
    learner = _make(cls, env_name)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(torch.randn_like(p))  # unlike any fresh copy's weights
    state = learner.acting_state()
    assert not [k for k in state["tensors"] if k.startswith(left_out)]
    assert not [k for k in state["tensors"] if "replay_buffer" in k]
    actor = _make(cls, env_name)
    actor.load_acting_state(decode(encode(state)))
    obs = torch.randn((5, ) + learner.observation_space.shape)
    with torch.no_grad():
        torch.manual_seed(1)
        want = learner.predict_step(learner.observe(obs, update=False))
        torch.manual_seed(1)
        got = actor.predict_step(actor.observe(obs, update=False))
    assert torch.equal(want.output, got.output)
