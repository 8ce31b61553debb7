"""Algorithms: the base classes, PPO, PPG, DQN and SAC."""
from alf.algorithms.algorithm import Algorithm  # noqa: F401
from alf.algorithms.rl_algorithm import (  # noqa: F401
    OnPolicyAlgorithm, RLAlgorithm)
from alf.algorithms.ppo_algorithm import PPOAlgorithm  # noqa: F401
from alf.algorithms.ppg_algorithm import PPGAlgorithm  # noqa: F401
from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm  # noqa: F401,E501
from alf.algorithms.dqn_algorithm import DQNAlgorithm  # noqa: F401
from alf.algorithms.sac_algorithm import SACAlgorithm  # noqa: F401
