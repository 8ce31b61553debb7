"""A new replay mode needs no edit outside itself: one written here, with
nothing but `alf.replay_buffers`' public API, is bound in gin into DQN on
CartPole and trains."""
import math

import gin
import pytest
import torch

from alf import trainers as alf_trainers
from alf.replay_buffers import Replay, ReplaySample
from alf.trainers import Trainer


@gin.configurable
class LastNReplay(Replay):
    """Uniform over the ``n`` most recent time steps of every stream.

    Args:
        n: how many of the latest time steps are drawn from.
    """

    def __init__(self, n: int = 8):
        self.n = n
        self.draws = []  # (buffer.num_added, indices) of every sample
        self.updates = []  # (indices, priorities) given back by the loss

    def sample(self, local_minibatch_size, progress=0.0, generator=None):
        buffer = self.buffer
        streams = buffer.batch_size
        steps = min(self.n, buffer.num_steps)
        k = torch.randint(steps * streams, (local_minibatch_size, ),
                          generator=generator)
        # The a-th most recent step sits a slots before the last added one.
        age, stream = k // streams, k % streams
        slot = (buffer.num_added - 1 - age) % buffer.capacity
        indices = slot * streams + stream
        self.draws.append((buffer.num_added, indices))
        return ReplaySample(buffer.gather(indices), indices, None,
                            1.0 / local_minibatch_size)

    def update_priorities(self, indices, priorities):
        self.updates.append((indices, priorities))


@pytest.fixture
def gin_config():
    yield alf_trainers.parse_config
    gin.clear_config()


@pytest.mark.timeout(300)
def test_a_replay_mode_written_outside_alf_trains_dqn(tmp_path, gin_config):
    gin_config(["dqn_cart_pole.gin"], [
        "DQNAlgorithm.replay = @LastNReplay()",
        "LastNReplay.n = 4",
        "TrainerConfig.num_env_steps = 320",
        "TrainerConfig.unroll_length = 16",
        "TrainerConfig.initial_collect_steps = 64",
        "TrainerConfig.minibatch_size = 16",
        "TrainerConfig.num_updates_per_iter = 4",
        "TrainerConfig.replay_buffer_capacity = 1000",
        "TrainerConfig.eval_interval = 0",
        "TrainerConfig.num_eval_episodes = 1",
        "TrainerConfig.summary_interval = 1",
        "TrainerConfig.seed = 0",
    ])
    trainer = Trainer(str(tmp_path))
    trainer.train()
    alg = trainer.algorithm
    replay = alg.replay
    assert isinstance(replay, LastNReplay) and replay.n == 4
    assert alg.replay_buffer is replay.buffer
    # 320 env steps in iterations of 32; training starts once 64 are
    # stored: 9 iterations of 4 updates, each on one of this mode's draws.
    assert len(replay.draws) == 9 * 4 == int(alg.num_updates)
    capacity, streams = replay.buffer.capacity, replay.buffer.batch_size
    assert capacity == 500  # uniform draws would mostly be far older
    for added, indices in replay.draws:
        age = (added - 1 - indices // streams) % capacity
        assert len(indices) == 16 and bool((age < 4).all()), (added, age)
    # The loss handed each draw's priorities (|TD error|) back to it.
    for (_, drawn), (given, priorities) in zip(replay.draws, replay.updates):
        assert given is drawn and priorities.shape == (16, )
    assert all(math.isfinite(v) for v in _train_losses(tmp_path))


def _train_losses(root):
    """The ``train/loss`` summaries of the run in ``root``."""
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    events = EventAccumulator(str(root / "train"))
    events.Reload()
    losses = [e.value for e in events.Scalars("train/loss")]
    assert losses, "no training summaries"
    return losses
