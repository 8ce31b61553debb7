"""Replay buffers: storage as registered buffers, minibatch iteration, and
the replay strategies off-policy algorithms take (`Replay`)."""
from alf.replay_buffers.replay_buffer import (  # noqa: F401
    ReplayBuffer, ReplaySample, iterate_minibatches, minibatch_indices)
from alf.replay_buffers.prioritized import (  # noqa: F401
    PrioritizedReplayBuffer)
from alf.replay_buffers.sum_tree import SumTree  # noqa: F401
from alf.replay_buffers.replay import Replay, UniformReplay  # noqa: F401
from alf.replay_buffers.prioritized_replay import (  # noqa: F401
    PrioritizedGlobalReplay, PrioritizedReplay)
from alf.replay_buffers.replay_modes import (  # noqa: F401
    REPLAY_MODES, as_replay)
