"""alf: reinforcement learning in PyTorch with method-level data parallelism.

Public names:

* `configurable`: marks a class or function as configurable from gin files.
"""
from alf.config import configurable  # noqa: F401

__version__ = "0.1.0"
