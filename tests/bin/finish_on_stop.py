"""Two ranks under alf's launcher that, once a stop signal reaches them,
finish (as a run whose last iteration completes when the stop comes) and
return normally. Prints the launcher's exit code (``exit N``); READY_FILE
appears once the ranks listen for the stop."""
import os
import sys
import time


def _ranks(ready_file: str) -> None:
    import torch
    import torch.distributed as dist

    from alf.trainers.stop_requests import StopRequests, install_handlers
    torch.set_num_threads(1)
    requests = StopRequests()
    restore = install_handlers(requests, dist.get_world_size(), False)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(ready_file, "w"):
            pass
    deadline = time.time() + 60
    while not requests.signal and time.time() < deadline:
        time.sleep(0.05)
    restore()  # finished: as `Trainer.train` returns


if __name__ == "__main__":
    from alf.bin.launch import launch
    code = launch(_ranks, (sys.argv[1], ), 2, prog="finish_on_stop",
                  stop_grace=20)
    print(f"exit {code}", flush=True)
    sys.exit(0 if os.path.exists(sys.argv[1]) else 2)
