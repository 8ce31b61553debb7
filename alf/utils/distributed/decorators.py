"""`data_distributed` and `activate_ddp`: a module's methods through DDP.

`activate_ddp(module)` gives each submodule the state its decorated methods
share (one DDP module, built lazily, the call-order counter, the first-call
decisions of ``find_unused_parameters='auto'``) and starts every rank from
rank 0's weights. A decorated method then runs through the DDP module when
it computes with gradients in a group of more than one process, and
untouched otherwise.
"""
import functools
import zlib
from typing import Callable, Optional

import torch
import torch.distributed as dist
from absl import logging
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from alf.utils.distributed import unused_parameters
from alf.utils.distributed.checks import (CallOrderHook, DecoratorMisuse,
                                          DistributedError,
                                          call_order_check,
                                          call_order_comm_hook,
                                          call_order_error,
                                          check_weights_equal)
from alf.utils.distributed.group import (get_rank, get_world_size,
                                         is_distributed)
from alf.utils.distributed.performer import make_ddp_performer
from alf.utils.distributed.rank_local import synced_state


def data_distributed(method: Optional[Callable] = None):
    """Runs ``method`` through DistributedDataParallel once activated.

    Decorate the method of an `nn.Module` whose result depends on the
    parameters and is backpropagated (a loss, an unroll). After
    `activate_ddp(module)` in a process group of more than one process, each
    call with gradients enabled goes through a DDP module built (once,
    lazily, on the first call; one per module, shared by its decorated
    methods) so that gradients are averaged across ranks in backward. The DDP
    module is cached on the module but is not a submodule: it never enters
    ``state_dict``. Outside a process group, without gradients, or on a
    deep copy of an activated module, the method runs untouched; in a
    group, with gradients, on a module that was never activated (not a
    submodule of the module activated, or no `activate_ddp` at all), it
    is refused: its gradients would stay the rank's own.

    A method may leave some parameters without gradient (an actor loss
    leaves the critic): the first call of each method finds out and sets DDP
    up for it (`make_ddp_performer`'s ``find_unused_parameters='auto'``).

    Several decorated methods on one module must be called in the same order
    on every rank; `call_order_check` verifies it at each call, inside the
    gradient all-reduce (no extra collective).

    Args:
        method: a method of an `nn.Module` subclass (``@data_distributed()``,
            with no method, works too).

    Returns:
        The wrapped method.
    """
    decorator = data_distributed_when(None)
    return decorator if method is None else decorator(method)


def data_distributed_when(cond: Optional[Callable[[nn.Module], bool]] = None):
    """Like `data_distributed`, but only when ``cond(module)`` is true.

    Args:
        cond: evaluated on the module at each call; None means always. It
            must give the same answer on every rank: with the call-order
            check on (``call_order_check.enabled``), a method whose calls
            kept out of DDP since its last DDP call differ in number across
            ranks fails its next DDP call on every rank.

    Returns:
        A decorator for a method of an `nn.Module` subclass.

    Raises:
        TypeError: for a ``cond`` that is not callable, and (from the
            decorator) for what is not a method: a static or class method,
            or ``@data_distributed_when`` without its condition.
    """
    if cond is not None and not callable(cond):
        raise DecoratorMisuse(f"data_distributed_when(cond): cond={cond!r} must "
                        "be a function of the module (or None)")

    def decorator(method, *args, **kwargs):
        if (args or kwargs or isinstance(method, nn.Module)
                or not callable(method)):
            # `@data_distributed_when` without (cond): the method became
            # this decorator and is called with the module and its args.
            raise DecoratorMisuse(
                f"{getattr(cond, '__qualname__', cond)} is decorated with "
                "data_distributed_when itself; write "
                "@data_distributed_when(cond), cond a function of the module")
        if isinstance(method, (staticmethod, classmethod)):
            raise DecoratorMisuse(
                f"@data_distributed on {type(method).__name__} "
                f"{method.__func__.__qualname__}: decorate a method of an "
                "nn.Module (its module's parameters are what DDP averages)")
        name = method.__qualname__

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if not isinstance(self, nn.Module):
                raise DecoratorMisuse(
                    f"@data_distributed on {name}, called with a "
                    f"{type(self).__name__} first: decorate a method of an "
                    "nn.Module (its module's parameters are what DDP "
                    "averages), not a function")
            state = self.__dict__.get("_alf_ddp")
            if (state is None and "_alf_ddp" not in self.__dict__
                    and torch.is_grad_enabled() and is_distributed()):
                # Never activated (a copy's state is None): its gradients
                # would stay this rank's, the weights drifting apart
                # without a word (the weight check sees only the
                # algorithm's own modules).
                raise DistributedError(
                    f"@data_distributed on {name}, in a group of "
                    f"{get_world_size()} processes: this "
                    f"{type(self).__name__} was not a submodule of the "
                    "module given to activate_ddp (the algorithm, when "
                    "training starts; kept in a plain list or dict, or made "
                    "later), or activate_ddp was never called, so its "
                    "gradients would not be averaged across ranks; make it "
                    "an attribute, or keep it in an nn.ModuleList or "
                    "nn.ModuleDict, when the algorithm is built")
            if (state is None or not torch.is_grad_enabled()
                    or not is_distributed()):
                # Without gradients there is nothing to all-reduce, and
                # evaluation (rank 0 only) must never enter a collective.
                return method(self, *args, **kwargs)
            if cond is not None and not cond(self):
                # Counted into this method's next DDP call's call-order
                # tag: ranks whose conditions disagreed fail the check
                # there, instead of pairing up different calls' gradients.
                local = state["local"]
                local[name] = local.get(name, 0) + 1
                return method(self, *args, **kwargs)
            shared = state["shared"]
            if shared["active"] is not None:
                _check_nested(self, state, name, shared["active"])
                return method(self, *args, **kwargs)  # part of that call
            performer = state["performer"]
            if performer is None:
                _check_has_parameters(self, name)
                _check_no_overlap(self, state, name)
                performer = state["performer"] = _new_performer(self, state)
            state["methods"].add(name)
            shared["calls"] += 1
            if state["hook"] is not None:
                state["hook"].tag(_tag_name(state, name), shared["calls"])
            try:
                if performer.alf_auto_unused and name not in state["checked"]:
                    return _first_call(self, state, name, method, args,
                                       kwargs)
                return _perform(self, state, name, method, *args, **kwargs)
            finally:
                state["local"].pop(name, None)  # counted since this call

        wrapper._alf_data_distributed = True
        return wrapper

    return decorator


def _no_state() -> None:
    return None


class _State(dict):
    """A submodule's data-distributed state, which its copies do not get.

    A deep copy of an activated module (``copy.deepcopy(self.actor)``, an
    "old policy"; or a pickled one) is a plain module, whose decorated
    methods run outside DDP: the state holds the DDP module over the
    original's parameters, and the whole algorithm, which a deep copy
    would duplicate (replay buffers included) and DDP cannot be copied.
    """

    def __deepcopy__(self, memo) -> None:
        return None

    def __reduce__(self):
        return _no_state, ()


def activate_ddp(module: nn.Module) -> None:
    """Enables the decorated methods of ``module`` and its submodules.

    Broadcasts rank 0's parameters and buffers (replay buffers excluded) at
    once, so that every rank acts with the same weights from the first step,
    and verifies them. A no-op outside distributed training.

    Args:
        module: the module (an algorithm) whose decorated methods, its
            submodules' included, go through DDP from now on.

    Raises:
        DistributedError: if the weights still differ after the broadcast.
    """
    if not is_distributed():
        return
    # Shared by every submodule: the call number runs over all of them, so
    # that two modules called in another order on another rank (whose
    # all-reduces then pair up) fail the check; and the data-distributed
    # call under way, inside which a decorated method runs as part of it.
    shared = {"calls": 0, "active": None, "root": module}
    for path, sub in module.named_modules():
        sub.__dict__["_alf_ddp"] = _State(
            performer=None, hook=None, shared=shared,
            path=path,  # "" for the module activated
            methods=set(), check_order=call_order_check(),
            # methods whose first call was checked for unused parameters
            # ('auto'), and those of them (in order) that need DDP's search
            checked=set(), needs_search={},
            first_calls=unused_parameters.FirstCalls(),
            # method -> its calls kept out of DDP (data_distributed_when)
            # since its last DDP call
            local={},
            last=None)  # the last method called through DDP
    tensors = [t for _, t in synced_state(module)]
    with torch.no_grad():
        for t in tensors:
            dist.broadcast(t, src=0)
    check_weights_equal(module)


def _tag_name(state: dict, name: str) -> str:
    """What the call-order check compares: the method and which module of
    the algorithm ran it (two critics of one class differ), and how many of
    its calls its `data_distributed_when` condition kept out of DDP since
    its last DDP call (other methods' local calls, which enter no
    collective, may differ across ranks)."""
    where = f"{name} of {state['path']}" if state["path"] else name
    local = state["local"].get(name, 0)
    return (f"{where} after {local} call{'s' if local > 1 else ''} of it "
            "kept out of DDP by data_distributed_when" if local else where)


def _where(state: dict) -> str:
    """The module's path in the activated module, or the latter's class."""
    return state["path"] or type(state["shared"]["root"]).__name__


def _trainable(module: nn.Module) -> set:
    return {id(p) for p in module.parameters() if p.requires_grad}


def _check_nested(module: nn.Module, state: dict, name: str, active) -> None:
    """A decorated method called inside another's data-distributed call
    runs as part of it, if that call's DDP module averages its parameters
    (it is the same module or one inside it)."""
    outer, outer_name = active
    if not _trainable(module) <= _trainable(outer):
        raise DistributedError(
            f"{name} (on {_where(state)}) is called inside {outer_name}'s "
            f"data-distributed call, whose module ({type(outer).__name__}) "
            "does not hold its parameters, so DDP would not average them: "
            "call it outside, or decorate a method of a module that holds "
            "both")


def _check_no_overlap(module: nn.Module, state: dict, name: str) -> None:
    """Refuses a second DDP module over parameters that another's already
    averages (a decorated loss on the algorithm and one on its critic):
    both would reduce them, which DDP fails at with errors that ask to
    report a torch bug."""
    mine = _trainable(module)
    for other in state["shared"]["root"].modules():
        theirs = other.__dict__.get("_alf_ddp")
        if (other is module or theirs is None or theirs["performer"] is None
                or not mine & _trainable(other)):
            continue
        raise DistributedError(
            f"{name} (on {_where(state)}) and "
            f"{', '.join(sorted(theirs['methods']))} (on {_where(theirs)}) "
            f"are data-distributed over {len(mine & _trainable(other))} "
            "shared parameters, which DDP cannot average twice: decorate "
            "the methods of one of the two modules (a decorated method "
            "called inside another's data-distributed call runs as part "
            "of it)")


def _grad_versions(module: nn.Module) -> list:
    """Which gradient tensor each parameter has, and its version: a
    backward changes one or the other."""
    return [None if p.grad is None else (id(p.grad), p.grad._version)
            for p in module.parameters()]


def _check_has_parameters(module: nn.Module, name: str) -> None:
    """Refuses a decorated method whose module has nothing for DDP to
    average (DDP itself fails with a bare StopIteration)."""
    if not any(p.requires_grad for p in module.parameters()):
        raise DistributedError(
            f"@data_distributed on {name}: {type(module).__name__} has no "
            "trainable parameters for DDP to average; decorate a method of "
            "the module that holds them (e.g. the algorithm's loss)")


# DDP's errors about a backward inside a call, and what they say.
_BACKWARD_INSIDE = {
    "Expected to mark a variable ready only once":
    "DDP saw a gradient twice",
    # With the unused-parameter search off, on a later call.
    "`initialize_buckets` must NOT be called during autograd":
    "DDP rebuilt its buckets inside a backward"}


def _perform(module: nn.Module, state: dict, name: str, method: Callable,
             *args, **kwargs):
    """Calls ``method`` through the module's DDP module."""
    performer = state["performer"]
    shared = state["shared"]
    shared["active"] = (module, name)
    try:
        output = performer(method, *args, **kwargs)
    except RuntimeError as e:
        # Raised by DDP before the method runs, about the call before this
        # one: the raw text advises a DDP argument alf users never pass.
        if unused_parameters.DDP_UNREDUCED in str(e):
            raise unused_parameters.unreduced_error(
                module, state["last"], performer.alf_auto_unused,
                str(e)) from None
        sign = next((sign for said, sign in _BACKWARD_INSIDE.items()
                     if said in str(e)), None)
        if sign:
            raise DistributedError(
                f"{name} backpropagated inside its data-distributed call "
                f"({sign}): decorate the method that returns the loss, and "
                "call backward on its result outside it") from e
        raise
    finally:
        shared["active"] = None
    state["last"] = name
    return output


def _new_performer(module: nn.Module, state: dict, **kwargs) -> DDP:
    """`make_ddp_performer` (``kwargs`` override gin), with the call-order
    hook when it is on."""
    performer = make_ddp_performer(module, **kwargs)
    if state["check_order"]:
        if state["hook"] is None:
            state["hook"] = CallOrderHook(get_world_size())
        performer.register_comm_hook(state["hook"], call_order_comm_hook)
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
    shared = state["shared"]
    shared["active"] = (module, name)  # a decorated method inside: part
    grads = _grad_versions(module)
    try:
        output = method(module, *args, **kwargs)
    finally:
        shared["active"] = None
    if _grad_versions(module) != grads:
        # Caught on this first call: DDP would only see it on a later one,
        # after an optimizer step on this rank's own gradients.
        raise DistributedError(
            f"{name} changed its module's gradients inside its "
            "data-distributed call (a backward, or zero_grad, in it): "
            "decorate the method that returns the loss, and call backward "
            "(and zero_grad) outside it")
    # Tags of (method, call number) ride along, as in the gradient
    # all-reduce: two ranks in different first calls fail here instead of
    # pairing up their decisions.
    tag = 0.0
    if state["check_order"]:
        key = f"{_tag_name(state, name)}#{state['shared']['calls']}"
        tag = float(zlib.crc32(key.encode()) % 2**24)
    found = state["first_calls"].decide(module, name, output, tag)
    if not found.same_call:
        raise call_order_error(_tag_name(state, name),
                               state["shared"]["calls"])
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
    # The search is on for all of a module's methods or for none: one
    # that needs it keeps it on for the others, whose calls it only slows.
    # In a backward of several methods' outputs DDP searches only the last
    # one, and a parameter that it leaves but an earlier one reaches is
    # "marked ready twice": there the search must be off, unless the last
    # output reaches every parameter. What the earlier outputs left alone
    # no longer counts.
    needs = state["needs_search"]
    for joined in found.joined:
        needs.pop(joined, None)
    if found.unused:
        needs[name] = None
    elif found.joint and needs and found.unused_alone:
        raise DistributedError(
            f"{together} are backpropagated together, which needs DDP's "
            "unused-parameter search off as the last leaves "
            f"{unused_parameters.describe(found.unused_alone)} without "
            f"gradient, while {' and '.join(needs)} leave(s) parameters "
            "without gradient, which needs it on; call backward after each "
            "data-distributed call, or compute the losses in one "
            "data-distributed method")
    search = bool(needs)
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
    # Later first calls are checked too. (nn.Module.__setattr__ is typed
    # for tensors and modules only; any other value is a plain attribute.)
    performer.alf_auto_unused = True  # type: ignore[assignment]
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
