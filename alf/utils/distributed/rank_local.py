"""Which state is rank-local and which must be equal on every rank.

Replay buffers are never synced (the distributed contract's rule 2): each
rank keeps its own experience. A module marks itself with `exclude_from_ddp`;
DDP's broadcast, `activate_ddp` and `check_weights_equal` all read the mark
through `synced_state` and `excluded_buffer_names`, so the rule lives here
once.
"""
from typing import List, Tuple

import torch
from torch import nn


def exclude_from_ddp(module: nn.Module) -> nn.Module:
    """Marks ``module``'s buffers (its submodules' included) as rank-local.

    DDP never broadcasts them, `activate_ddp` does not overwrite them with
    rank 0's and `check_weights_equal` does not compare them: each rank keeps
    its own. `ReplayBuffer` calls it on itself, so that this package knows
    which buffers hold experience without importing the replay buffers
    (which import it). Its parameters stay synced: DDP averages their
    gradients and the check compares them. So a BatchNorm module, whose
    running statistics each rank updates from its own batches, is marked
    with it (evaluation, on rank 0, uses rank 0's).

    Args:
        module: the module to mark.

    Returns:
        ``module``.
    """
    # An attribute, not a registry: it follows the module through deepcopy
    # and pickling (actor processes get copies of the algorithm).
    module.__dict__["_alf_exclude_from_ddp"] = True
    return module


def excluded_buffer_names(module: nn.Module) -> List[str]:
    """Names of every buffer under a module marked with `exclude_from_ddp`.

    Args:
        module: the module to search, itself included.

    Returns:
        The names, relative to ``module``.
    """
    names = []
    for prefix, sub in module.named_modules():
        if sub.__dict__.get("_alf_exclude_from_ddp", False):
            names += [f"{prefix}.{n}" if prefix else n
                      for n, _ in sub.named_buffers()]
    return names


def synced_state(module: nn.Module) -> List[Tuple[str, torch.Tensor]]:
    """Parameters and buffers that must be equal on every rank.

    Everything except the buffers of modules marked with `exclude_from_ddp`
    (replay buffers: each rank keeps its own experience).

    Args:
        module: the module whose state to list.

    Returns:
        ``(name, tensor)`` pairs: the parameters' data, then the buffers,
        in ``named_parameters`` and ``named_buffers`` order.
    """
    skip = set(excluded_buffer_names(module))
    state = [(n, p.data) for n, p in module.named_parameters()]
    state += [(n, b) for n, b in module.named_buffers() if n not in skip]
    return state
