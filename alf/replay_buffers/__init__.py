"""Replay buffers: storage as registered buffers, plus minibatch iteration."""
from alf.replay_buffers.replay_buffer import (  # noqa: F401
    ReplayBuffer, iterate_minibatches, minibatch_indices)
