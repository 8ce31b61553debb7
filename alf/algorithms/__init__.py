"""Algorithms: the base classes and PPO."""
from alf.algorithms.algorithm import Algorithm  # noqa: F401
from alf.algorithms.rl_algorithm import (  # noqa: F401
    OnPolicyAlgorithm, RLAlgorithm)
from alf.algorithms.ppo_algorithm import PPOAlgorithm  # noqa: F401
from alf.algorithms.ppg_algorithm import PPGAlgorithm  # noqa: F401
