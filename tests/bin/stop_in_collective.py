"""Two ranks under alf's launcher: rank 1, training (a stop signal only asks
it to stop after its iteration), waits in a collective that rank 0, still
before training (a stop signal ends it at once), never joins. Prints the
launcher's exit code (``exit N``); ``READY_FILE`` appears once rank 0 is in
its sleep."""
import os
import signal
import sys
import time


def _ranks(ready_file: str) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if dist.get_rank() == 0:
        with open(ready_file, "w"):
            pass
        time.sleep(60)  # ends on the stop signal the launcher forwards
    else:
        # As the trainer's stop request does: note the signal, finish the
        # iteration (here: a collective rank 0 never joins).
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        dist.barrier()


if __name__ == "__main__":
    from alf.bin.launch import launch
    code = launch(_ranks, (sys.argv[1], ), 2, prog="stop_in_collective",
                  stop_grace=20)
    print(f"exit {code}", flush=True)
    sys.exit(0 if os.path.exists(sys.argv[1]) else 2)
