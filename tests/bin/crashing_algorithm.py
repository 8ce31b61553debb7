"""A PPO that raises on rank 1 at its third training iteration (for tests
of how a crashing rank ends a distributed run)."""
import gin

from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.utils import distributed


@gin.configurable
class CrashingPPO(PPOAlgorithm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._iters = 0

    def train_iter(self, progress):
        self._iters += 1
        if distributed.get_rank() == 1 and self._iters == 3:
            raise RuntimeError("injected crash on rank 1")
        return super().train_iter(progress)
