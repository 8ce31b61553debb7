"""Two ranks, under alf's launcher or (``--torchrun``, run by torchrun) under
``alf.bin.train``'s torchrun path: rank 1, training (a stop signal only asks
it to stop after its iteration), waits in a collective that rank 0, still
before training (a stop signal ends it at once), never joins.

Under the launcher it prints the launcher's exit code (``exit N``); under
torchrun each rank that returns writes its exit code to ``READY_FILE.rankR``.
``READY_FILE`` appears once rank 0 is in its sleep."""
import os
import sys
import time


def _ranks(ready_file: str) -> None:
    import torch
    import torch.distributed as dist

    from alf.trainers.stop_requests import StopRequests, install_handlers
    torch.set_num_threads(1)
    if dist.get_rank() == 0:
        with open(ready_file, "w"):
            pass
        time.sleep(60)  # ends on the stop signal
    else:
        # The trainer's handlers: note the signal, finish the iteration
        # (here: a collective rank 0 never joins).
        install_handlers(StopRequests(), dist.get_world_size(), False)
        dist.barrier()


def _under_torchrun(ready_file: str) -> None:
    from alf.bin import train
    train.train_parsed = lambda root_dir: _ranks(ready_file)
    code = train._train_under_torchrun(os.path.dirname(ready_file))
    with open(f"{ready_file}.rank{os.environ['RANK']}", "w") as f:
        f.write(f"exit {code}")
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "--torchrun":
        _under_torchrun(sys.argv[2])
    from alf.bin.launch import launch
    code = launch(_ranks, (sys.argv[1], ), 2, prog="stop_in_collective",
                  stop_grace=20)
    print(f"exit {code}", flush=True)
    sys.exit(0 if os.path.exists(sys.argv[1]) else 2)
