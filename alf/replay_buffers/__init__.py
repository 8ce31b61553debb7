"""Replay buffers: storage as registered buffers, plus minibatch iteration."""
from alf.replay_buffers.replay_buffer import (  # noqa: F401
    ReplayBuffer, iterate_minibatches, minibatch_indices)
from alf.replay_buffers.prioritized import (  # noqa: F401
    PrioritizedBatch, PrioritizedReplayBuffer)
from alf.replay_buffers.sum_tree import SumTree  # noqa: F401
