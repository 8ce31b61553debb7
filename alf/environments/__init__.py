"""Environments: batched gymnasium environments returning torch tensors."""
from alf.environments import suite_gym  # noqa: F401
