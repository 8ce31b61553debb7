"""A PPO whose deterministic actions (evaluations) take 0.2 s each while
the file named by ``ALF_TEST_SLOW_EVAL`` can be created: it is created at
the first such action, so that a test sees the evaluation under way (as a
calibrating evaluation on MetaDrive lasts minutes)."""
import os
import time

import gin

from alf.algorithms.ppo_algorithm import PPOAlgorithm


@gin.configurable
class SlowEvaluationPPO(PPOAlgorithm):
    def predict_step(self, *args, **kwargs):
        marker = os.environ.get("ALF_TEST_SLOW_EVAL")
        if marker:
            with open(marker, "a"):
                pass
            time.sleep(0.2)
        return super().predict_step(*args, **kwargs)
