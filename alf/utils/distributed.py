"""Data-parallel training: `@data_distributed`, rank helpers, sync checks.

With `alf.utils.process_group` (whose public names it re-exports), this is
the only module that knows about process groups. Algorithms mark the
method whose output depends on the parameters (a loss or an unroll) with
`data_distributed`; after `activate_ddp(module)` inside a process group of
more than one process, calls of that method go through a
`DistributedDataParallel` module built for it, so that the backward pass
all-reduces gradients. Everything else (environments, replay buffers,
evaluation) stays plain Python on each rank.
"""
import functools
import inspect
import zlib
from typing import Callable, List, Optional, Tuple, Union

import gin
import torch
import torch.distributed as dist
from absl import logging
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from alf.utils import unused_parameters
from alf.utils.errors import ConfigError
from alf.utils.process_group import (  # re-exported (__all__)
    collective_timeout, is_peer_failure, local_device, peer_failure_reason,
    process_group, remove_rendezvous, rendezvous_file, uses_gpus)

__all__ = [
    "DistributedError", "data_distributed", "data_distributed_when",
    "make_ddp_performer", "activate_ddp", "exclude_from_ddp",
    "is_distributed", "get_rank", "get_world_size", "process_group",
    "all_reduce_sum", "all_reduce_max", "all_reduce_mean", "standardize",
    "standardize_parts", "check_weights_equal", "broadcast_object",
    "local_device", "uses_gpus", "collective_timeout", "rendezvous_file",
    "remove_rendezvous", "is_peer_failure", "peer_failure_reason"
]


class DistributedError(RuntimeError):
    """Ranks disagree (call order, weights): training cannot go on."""


# ---- process groups ---------------------------------------------------------
def is_distributed() -> bool:
    """Whether a default process group of more than one process is active."""
    return (dist.is_available() and dist.is_initialized()
            and dist.get_world_size() > 1)


def get_rank() -> int:
    """This process's rank (0 outside distributed training)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """Number of processes training together (1 outside distributed)."""
    return dist.get_world_size() if is_distributed() else 1


# ---- small collectives ------------------------------------------------------
def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sums ``tensor`` in place across ranks; a no-op in a single process."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Elementwise maximum of ``tensor`` across ranks, in place; a no-op in
    a single process."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Averages ``tensor`` in place across ranks; a no-op in one process."""
    if is_distributed():
        dist.all_reduce(tensor)
        tensor /= dist.get_world_size()
    return tensor


def broadcast_object(obj, src: int = 0):
    """Returns rank ``src``'s ``obj`` on every rank (pickled; trusted data)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def standardize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` with the mean and std of all ranks' ``x``
    (see `standardize_parts`)."""
    return standardize_parts([x], eps)[0]


def standardize_parts(parts: List[torch.Tensor],
                      eps: float = 1e-8) -> List[torch.Tensor]:
    """Standardises each tensor of ``parts`` with its own mean and std over
    all ranks, all in one all-reduce.

    With equal per-rank sizes, N ranks holding pieces of each part get
    exactly what one process holding the whole parts would. On CPU a
    collective costs more than a small minibatch's compute, so PPO passes
    every minibatch of an iteration at once. The std is the population one,
    so a single element gives 0, not NaN.
    """
    sums = torch.stack([
        torch.stack([p.sum(), p.square().sum(),
                     torch.tensor(float(p.numel()), device=p.device)])
        for p in parts
    ]).double()
    all_reduce_sum(sums)
    mean = sums[:, 0] / sums[:, 2]
    std = (sums[:, 1] / sums[:, 2] - mean * mean).clamp(min=0).sqrt()
    return [(p - m) / (sd + eps)
            for p, m, sd in zip(parts, mean.to(parts[0].dtype),
                                std.to(parts[0].dtype))]


# ---- which state DDP must leave alone ---------------------------------------
def exclude_from_ddp(module: nn.Module) -> nn.Module:
    """Marks ``module``'s buffers (its submodules' included) as rank-local.

    DDP never broadcasts them, `activate_ddp` does not overwrite them with
    rank 0's and `check_weights_equal` does not compare them: each rank keeps
    its own. `ReplayBuffer` calls it on itself, so that this module knows
    which buffers hold experience without importing the replay buffers
    (which import it). A marked module should hold no parameters.

    Returns:
        ``module``.
    """
    # An attribute, not a registry: it follows the module through deepcopy
    # and pickling (actor processes get copies of the algorithm).
    module.__dict__["_alf_exclude_from_ddp"] = True
    return module


def _excluded_buffer_names(module: nn.Module) -> List[str]:
    """Names (relative to ``module``) of every buffer under a module marked
    with `exclude_from_ddp`."""
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
    """
    skip = set(_excluded_buffer_names(module))
    state = [(n, p.data) for n, p in module.named_parameters()]
    state += [(n, b) for n, b in module.named_buffers() if n not in skip]
    return state


# ---- the decorator ----------------------------------------------------------
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


@gin.configurable(denylist=["init_sync"])
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
            methods (off again if methods summed into one backward use
            every parameter together). Calls after a method's first cost
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
            `check_weights_equal`; a per-call broadcast cost 0.5-1 ms on CPU.
            Replay-buffer storage is always excluded.
        init_sync: let DDP check shapes and broadcast rank 0's state (not
            settable from gin). False when rebuilt during a call: the
            output's graph holds the parameters, which a broadcast would
            overwrite in place.

    Returns:
        The DDP module; its ``alf_auto_unused`` attribute says whether the
        first call of each method must be checked ('auto').

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
    kwargs = {} if init_sync else {"init_sync": False}
    # torch >= 2.13 renamed broadcast_buffers to forward_sync_buffers.
    kwargs["forward_sync_buffers" if "forward_sync_buffers" in ddp_args
           else "broadcast_buffers"] = broadcast_buffers
    performer = _MethodPerformer(module)
    ignore = ["module." + n for n in _excluded_buffer_names(module)]
    DDP._set_params_and_buffers_to_ignore_for_model(performer, ignore)
    device = next(module.parameters()).device
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(performer, device_ids=device_ids,
              find_unused_parameters=find, bucket_cap_mb=bucket_cap_mb,
              gradient_as_bucket_view=gradient_as_bucket_view,
              static_graph=static_graph, **kwargs)
    ddp.alf_auto_unused = auto
    return ddp


@gin.configurable
def call_order_check(enabled: bool = True) -> bool:
    """Whether DDP calls verify that every rank runs the same method as the
    same call number (read once, at `activate_ddp`)."""
    return enabled


class _CallOrderHook:
    """A DDP communication hook that also checks the call order, for free.

    Each DDP call tags its first gradient bucket with three 8-bit hashes v of
    (method, call number). The tags ride in the same all-reduce as the
    gradients and come back as sum(v) and sum(v^2) over ranks, which are
    exact in float32 for up to 256 ranks; all ranks had the same tags iff
    ``N * sum(v^2) == sum(v)^2`` (Cauchy-Schwarz). A mismatch raises during
    backward, before any optimizer step could apply mixed gradients. Apart
    from the tags, it is DDP's default hook (average by pre-division).
    """

    _MODULI = (251, 241, 239)

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.pending = None  # (method name, call number) of the next backward

    def tag(self, name: str, call: int) -> None:
        """Marks the next backward as call number ``call`` of ``name``."""
        self.pending = (name, call)

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """All-reduces (averages) one gradient bucket, with tags if due."""
        buf = bucket.buffer().div_(self.world_size)
        pending, self.pending = self.pending, None
        if pending is None or bucket.index() != 0:
            fut = dist.all_reduce(buf, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])
        key = f"{pending[0]}#{pending[1]}".encode()
        tags = torch.tensor([zlib.crc32(key, i) % m
                             for i, m in enumerate(self._MODULI)],
                            dtype=buf.dtype, device=buf.device)
        n = len(tags)
        fut = dist.all_reduce(torch.cat([buf, tags, tags * tags]),
                              async_op=True).get_future()

        def finish(f):
            out = f.value()[0]
            sums = out[-2 * n:].double()
            if not torch.equal(self.world_size * sums[n:], sums[:n]**2):
                raise _call_order_error(*pending)
            return out[:-2 * n]

        return fut.then(finish)


def _call_order_error(name: str, call: int) -> DistributedError:
    return DistributedError(
        f"call order differs across ranks: on rank {get_rank()}, DDP call "
        f"#{call} of this module ran {name}, while another rank ran a "
        "different method or call number; every rank must call the "
        "data-distributed methods of a module in the same order")


def _call_order_comm_hook(state: _CallOrderHook, bucket: dist.GradBucket
                          ) -> torch.futures.Future[torch.Tensor]:
    return state.reduce(bucket)


def data_distributed_when(cond: Optional[Callable[[nn.Module], bool]] = None):
    """Like `data_distributed`, but only when ``cond(module)`` is true.

    Args:
        cond: evaluated on the module at each call; None means always.
    """

    def decorator(method):
        name = method.__qualname__

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            state = self.__dict__.get("_alf_ddp")
            if (state is None or not torch.is_grad_enabled()
                    or not is_distributed() or (cond is not None
                                                and not cond(self))):
                # Without gradients there is nothing to all-reduce, and
                # evaluation (rank 0 only) must never enter a collective.
                return method(self, *args, **kwargs)
            performer = state["performer"]
            if performer is None:
                performer = state["performer"] = _new_performer(self, state)
            if state["hook"] is not None:
                state["calls"] += 1
                state["hook"].tag(name, state["calls"])
            if performer.alf_auto_unused and name not in state["checked"]:
                return _first_call(self, state, name, method, args, kwargs)
            return _perform(self, state, name, method, *args, **kwargs)

        wrapper._alf_data_distributed = True
        return wrapper

    return decorator


def _perform(module: nn.Module, state: dict, name: str, method: Callable,
             *args, **kwargs):
    """Calls ``method`` through the module's DDP module."""
    performer = state["performer"]
    try:
        output = performer(method, *args, **kwargs)
    except RuntimeError as e:
        # Raised by DDP before the method runs, about the call before this
        # one: the raw text advises a DDP argument alf users never pass.
        if unused_parameters.DDP_UNREDUCED in str(e):
            raise unused_parameters.unreduced_error(
                module, state["last"], performer.alf_auto_unused,
                str(e)) from None
        raise
    state["last"] = name
    return output


def _new_performer(module: nn.Module, state: dict, **kwargs) -> DDP:
    """`make_ddp_performer` (``kwargs`` override gin), with the call-order
    hook when it is on."""
    performer = make_ddp_performer(module, **kwargs)
    if state["check_order"]:
        if state["hook"] is None:
            state["hook"] = _CallOrderHook(get_world_size())
        performer.register_comm_hook(state["hook"], _call_order_comm_hook)
    return performer


def _first_call(module: nn.Module, state: dict, name: str, method: Callable,
                args: tuple, kwargs: dict):
    """The first call of ``name`` under ``find_unused_parameters='auto'``.

    The method runs outside DDP and the decision is taken on its output's
    graph (with the outputs it will be backpropagated with, if any: see
    `unused_parameters.FirstCalls`); then the output passes through the
    module's DDP module (rebuilt if the decision changes the search),
    whose forward returns it as is and prepares the reducer for its
    backward, as if it had computed it. Running the method once, not a
    probe and then the real call, keeps its side effects (random numbers
    drawn, counters) those of one call.
    """
    output = method(module, *args, **kwargs)
    # Tags of (method, call number) ride along, as in the gradient
    # all-reduce: two ranks in different first calls fail here instead of
    # pairing up their decisions.
    tag = 0.0
    if state["check_order"]:
        tag = float(zlib.crc32(f"{name}#{state['calls']}".encode()) % 2**24)
    found = state["first_calls"].decide(module, name, output, tag)
    if not found.same_call:
        raise _call_order_error(name, state["calls"])
    state["checked"].add(name)
    unused = unused_parameters.describe(found.unused)
    together = " and ".join(found.joined + [name])
    if found.joint and found.unused:
        # DDP's search would see only this call's output and count the
        # earlier calls' parameters as unused: "marked ready twice".
        raise DistributedError(
            f"{together} are backpropagated together and leave {unused} "
            "without gradient, which DDP cannot reduce; call backward after "
            "each data-distributed call, or compute the losses in one "
            "data-distributed method")
    search = bool(found.unused)
    if search == state["performer"].find_unused_parameters:
        return _perform(module, state, name, lambda _module: output)
    old = state["performer"]
    old._remove_autograd_hooks()  # this backward is the new one's
    if found.joint:
        # The earlier outputs went through ``old``, whose backward (DDP's
        # sink) needs it: this output's graph keeps it until then.
        unused_parameters.keep_until_backward(output, old)
    performer = state["performer"] = _new_performer(
        module, state, find_unused_parameters=search, init_sync=False)
    performer.alf_auto_unused = True  # later first calls are checked too
    if get_rank() == 0 and search:
        logging.info(
            "%s leaves %d parameter(s) without gradient (%s): alf turned on "
            "DDP's unused-parameter search for every data-distributed method "
            "of %s (make_ddp_performer.find_unused_parameters = 'auto'; set "
            "it to True to skip this first-call check)", name,
            len(found.unused), unused, type(module).__name__)
    elif get_rank() == 0:
        logging.info(
            "%s are backpropagated together and use every parameter: alf "
            "turned DDP's unused-parameter search off again for %s", together,
            type(module).__name__)
    return _perform(module, state, name, lambda _module: output)


def data_distributed(method):
    """Runs ``method`` through DistributedDataParallel once activated.

    Decorate the method of an `nn.Module` whose result depends on the
    parameters and is backpropagated (a loss, an unroll). After
    `activate_ddp(module)` in a process group of more than one process, each
    call with gradients enabled goes through a DDP module built (once,
    lazily, on the first call; one per module, shared by its decorated
    methods) so that gradients are averaged across ranks in backward. The DDP
    module is cached on the module but is not a submodule: it never enters
    ``state_dict``. Outside that, the method runs untouched.

    A method may leave some parameters without gradient (an actor loss
    leaves the critic): the first call of each method finds out and sets DDP
    up for it (`make_ddp_performer`'s ``find_unused_parameters='auto'``).

    Several decorated methods on one module must be called in the same order
    on every rank; `call_order_check` verifies it at each call, inside the
    gradient all-reduce (no extra collective).
    """
    return data_distributed_when(None)(method)


def activate_ddp(module: nn.Module) -> None:
    """Enables the decorated methods of ``module`` and its submodules.

    Broadcasts rank 0's parameters and buffers (replay buffers excluded) at
    once, so that every rank acts with the same weights from the first step,
    and verifies them. A no-op outside distributed training.
    """
    if not is_distributed():
        return
    for sub in module.modules():
        sub.__dict__["_alf_ddp"] = {"performer": None, "hook": None,
                                    "calls": 0,
                                    "check_order": call_order_check(),
                                    # methods whose first call was checked
                                    # for unused parameters ('auto')
                                    "checked": set(),
                                    "first_calls":
                                    unused_parameters.FirstCalls(),
                                    # the last method called through DDP
                                    "last": None}
    tensors = [t for _, t in synced_state(module)]
    with torch.no_grad():
        for t in tensors:
            dist.broadcast(t, src=0)
    check_weights_equal(module)


def _checksums(tensors: List[torch.Tensor]) -> torch.Tensor:
    # Computed where the tensors live; one copy to the CPU at the end.
    rows = [torch.stack([t.double().sum(), t.double().abs().sum()])
            if t.numel() else t.new_zeros(2, dtype=torch.float64)
            for t in tensors]
    return (torch.cat(rows).cpu() if rows else
            torch.zeros(0, dtype=torch.float64))


def check_weights_equal(module: nn.Module) -> None:
    """Raises `DistributedError` if any synced tensor differs across ranks.

    Compares a checksum (sum and sum of absolute values, in float64) of every
    parameter and every buffer outside replay buffers, which catches drift
    in state that backward does not update (normalisers, target networks).

    Raises:
        DistributedError: naming the first tensor that differs and its
            checksums on the lowest and highest ranks.
    """
    if not is_distributed():
        return
    named = synced_state(module)
    sums = _checksums([t.detach() for _, t in named])
    both = all_reduce_max(torch.cat([sums, -sums]))
    hi, lo = both[:len(sums)], both[len(sums):]
    bad = (hi != -lo).nonzero()
    if len(bad):
        i = int(bad[0]) // 2
        raise DistributedError(
            f"weights differ across ranks: {named[i][0]} has checksum "
            f"{sums[2 * i].item():.9g} here (rank {get_rank()}); over all "
            f"ranks it ranges {-lo[2 * i].item():.9g} .. "
            f"{hi[2 * i].item():.9g} ({len(bad)} checksums differ)")
