"""Trainers: configuration, the training loop, evaluation, checkpoints."""
from alf.trainers.trainer_config import TrainerConfig  # noqa: F401
from alf.trainers.trainer import Trainer, TrainingInterrupted  # noqa: F401
from alf.trainers.config_parser import parse_config  # noqa: F401
