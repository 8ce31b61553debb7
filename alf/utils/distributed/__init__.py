"""Data-parallel training: `@data_distributed`, process groups, rank
helpers, collectives, sync checks.

This package is the only place in alf that knows about process groups.
Algorithms mark the method whose output depends on the parameters (a loss
or an unroll) with `data_distributed`; after `activate_ddp(module)` inside a
process group of more than one process, calls of that method go through a
`DistributedDataParallel` module built for it, so that the backward pass
all-reduces gradients. Everything else (environments, replay buffers,
evaluation) stays plain Python on each rank.

Import the names below from here; the modules are:

* `group`: forming and tearing down the process group; rank, world size,
  device; the collective timeout.
* `heartbeat`: signs of life in torchrun's store, to name a stalled rank.
* `peer_failure`: telling a peer's failure from a cause.
* `collectives`: all-reduce and broadcast helpers, no-ops in one process.
* `standardization`: mean and std over all ranks' data.
* `rank_local`: which state is each rank's own (replay buffers) and which
  must be equal on every rank.
* `performer`: the DDP module through which decorated methods run.
* `unused_parameters`: which parameters a call leaves without gradient.
* `checks`: that ranks agree on call order and weights.
* `decorators`: `data_distributed`, `data_distributed_when`, `activate_ddp`.

A test that replaces one of these names (``monkeypatch.setattr``) reaches
the code that calls it through this package (``distributed.get_rank()``),
not this package's own modules, which import each other's names directly.
"""
from alf.utils.distributed.checks import (DistributedError, call_order_check,
                                          check_weights_equal,
                                          raised_in_callback)
from alf.utils.distributed.collectives import (all_reduce_max,
                                               all_reduce_mean,
                                               all_reduce_sum, any_rank,
                                               broadcast_object)
from alf.utils.distributed.decorators import (activate_ddp, data_distributed,
                                              data_distributed_when)
from alf.utils.distributed.group import (collective_timeout, get_rank,
                                         get_world_size, is_distributed,
                                         local_device, process_group,
                                         remove_rendezvous, rendezvous_file,
                                         silent_ranks, store, uses_gpus)
from alf.utils.distributed.peer_failure import (is_peer_failure,
                                                peer_failure_reason)
from alf.utils.distributed.performer import (FIND_UNUSED_PARAMETERS,
                                             make_ddp_performer)
from alf.utils.distributed.rank_local import exclude_from_ddp, synced_state
from alf.utils.distributed.standardization import (standardize,
                                                   standardize_parts)

__all__ = [
    "DistributedError", "data_distributed", "data_distributed_when",
    "make_ddp_performer", "activate_ddp", "exclude_from_ddp",
    "is_distributed", "get_rank", "get_world_size", "process_group",
    "all_reduce_sum", "all_reduce_max", "all_reduce_mean", "any_rank",
    "standardize",
    "standardize_parts", "check_weights_equal", "broadcast_object",
    "local_device", "uses_gpus", "collective_timeout", "rendezvous_file",
    "remove_rendezvous", "is_peer_failure", "peer_failure_reason", "store",
    "silent_ranks", "call_order_check", "FIND_UNUSED_PARAMETERS",
    "synced_state", "raised_in_callback"
]
