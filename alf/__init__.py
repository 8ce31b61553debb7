"""alf: reinforcement learning in PyTorch with method-level data parallelism.

Public names:

* `configurable`: marks a class or function as configurable from gin files.
* `data_distributed`, `data_distributed_when`, `make_ddp_performer`,
  `activate_ddp`: data-parallel training of a module's methods (from
  `alf.utils.distributed`).
"""
from alf.config import configurable  # noqa: F401

__version__ = "0.1.0"

_DISTRIBUTED = ("data_distributed", "data_distributed_when",
                "make_ddp_performer", "activate_ddp")


def __getattr__(name):
    # Imported on first use: environment worker processes import alf's
    # torch-free modules and must not pay for torch.
    if name in _DISTRIBUTED:
        from alf.utils import distributed
        return getattr(distributed, name)
    raise AttributeError(f"module 'alf' has no attribute {name!r}")
