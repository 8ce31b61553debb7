"""The DDP module through which a module's data-distributed methods run.

`make_ddp_performer` wraps a `_MethodPerformer` (whose ``forward`` calls a
given method on the original module) in `DistributedDataParallel`, with
DDP's options from gin and the replay buffers left out of its broadcast.
"""
import inspect
from typing import Any, Callable, Dict, Union

import gin
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from alf.utils.distributed.rank_local import excluded_buffer_names
from alf.utils.errors import ConfigError


class _MethodPerformer(nn.Module):
    """The module DDP wraps: ``forward(method, ...)`` runs ``method(module,
    ...)``.

    One performer (one DDP reducer) serves every decorated method of a
    module. Two DDP modules over the same parameters do not work together:
    each reducer hooks every parameter, and once one of them has a parameter
    without gradient (PPG's auxiliary head in the policy phase) the next
    backward through the other fails ("Encountered gradient which is
    undefined, but still allreduced by DDP reducer", torch 2.13). So
    unused-parameter detection is on or off for all of a module's methods
    at once (see `make_ddp_performer`).
    """

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, method: Callable, *args, **kwargs):
        return method(self.module, *args, **kwargs)


#: The values of `make_ddp_performer`'s ``find_unused_parameters``.
FIND_UNUSED_PARAMETERS = (True, False, "auto")


# Registered under the package's name, the path users import it from.
@gin.configurable(module="alf.utils.distributed", denylist=["init_sync"])
def make_ddp_performer(module: nn.Module,
                       find_unused_parameters: Union[bool, str] = "auto",
                       bucket_cap_mb: float = 25.0,
                       gradient_as_bucket_view: bool = True,
                       static_graph: bool = False,
                       broadcast_buffers: bool = False,
                       init_sync: bool = True) -> DDP:
    """Builds the DDP module through which ``module``'s decorated methods run.

    Args:
        module: the module whose parameters the methods use.
        find_unused_parameters: whether DDP looks, in every call, for
            parameters that the call leaves without gradient (PPG's
            auxiliary head in the policy phase; an actor loss and a critic
            loss with their own optimizers). That search costs a walk of the
            autograd graph and an extra all-reduce per call, so it is off
            unless needed. ``'auto'`` (default): the first call of each
            decorated method runs outside DDP and its output's graph is
            walked (with those of earlier first calls whose outputs wait
            for the same backward); if that backward would leave any
            parameter without gradient on any rank (one all-reduce, first
            calls only), rank 0 logs the method and the parameters, and the
            module's DDP module is rebuilt with the search on, for all its
            methods; it stays on while other methods use every
            parameter. Methods whose losses are summed into one backward
            are judged together: DDP searches only the last output, so the
            search goes off again if they use every parameter together,
            unless another method needs it and the last output reaches
            every parameter (else an error: it would have to be on and
            off). Calls after a method's first cost
            nothing extra. A method whose first call reaches every
            parameter but a later call does not stops with a one-line
            error naming it; so does any such method under ``False``.
            ``True``: always on, no first-call check.
        bucket_cap_mb: DDP's gradient bucket size.
        gradient_as_bucket_view: gradients alias DDP's buckets (saves a
            copy).
        static_graph: the set of used parameters never changes.
        broadcast_buffers: broadcast rank 0's buffers before every forward.
            Off by default: buffers are broadcast once at `activate_ddp`,
            and state that changes outside backward is kept equal by its
            owner (normalisers all-reduce their statistics) and verified by
            `check_weights_equal`; a per-call broadcast costs more than a
            small update (docs/benchmarks.md).
            Replay-buffer storage is always excluded.
        init_sync: let DDP check shapes and broadcast rank 0's state (not
            settable from gin). False when rebuilt during a call: the
            output's graph holds the parameters, which a broadcast would
            overwrite in place.

    Returns:
        The DDP module; its ``alf_auto_unused`` attribute says whether the
        first call of each method must be checked ('auto'), and
        ``alf_averaged`` holds the ids of the parameters it averages.

    Raises:
        ConfigError: for a ``find_unused_parameters`` other than True,
            False or 'auto'.
    """
    if find_unused_parameters not in FIND_UNUSED_PARAMETERS:
        raise ConfigError(
            f"make_ddp_performer.find_unused_parameters = "
            f"{find_unused_parameters!r}: expected True, False or 'auto'")
    # A static graph finds its unused parameters itself (they must not
    # change), so 'auto' has nothing to decide there. Before torch 2.6 DDP
    # cannot be built without broadcasting into the parameters, which
    # 'auto' must do during a call: there the search is always on.
    ddp_args = inspect.signature(DDP.__init__).parameters
    auto, find = False, find_unused_parameters
    if find_unused_parameters == "auto":
        auto = not static_graph and "init_sync" in ddp_args
        find = not static_graph and not auto
    kwargs: Dict[str, Any] = {} if init_sync else {"init_sync": False}
    # torch >= 2.13 renamed broadcast_buffers to forward_sync_buffers.
    kwargs["forward_sync_buffers" if "forward_sync_buffers" in ddp_args
           else "broadcast_buffers"] = broadcast_buffers
    performer = _MethodPerformer(module)
    ignore = ["module." + n for n in excluded_buffer_names(module)]
    DDP._set_params_and_buffers_to_ignore_for_model(performer, ignore)
    device = next(module.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(performer, device_ids=device_ids,
              find_unused_parameters=find, bucket_cap_mb=bucket_cap_mb,
              gradient_as_bucket_view=gradient_as_bucket_view,
              static_graph=static_graph, **kwargs)
    # nn.Module.__setattr__ is typed for tensors and modules only; torch
    # stores any other value as a plain attribute.
    ddp.alf_auto_unused = auto  # type: ignore[assignment]
    # What DDP averages, for the weight check's hint: the parameters that
    # require grad now (DDP keeps no list of its own).
    ddp.alf_averaged = frozenset(  # type: ignore[assignment]
        id(p) for p in module.parameters() if p.requires_grad)
    return ddp
