"""alf.bin.train's main with a training that returns at once (the run is
finished), then a SIGTERM to this process, as a scheduler's that lands as
the finished run exits. Prints main's code, then "survived"."""
import os
import signal
import sys
import time

from absl import flags

from alf.bin import train
from alf.trainers import Trainer

if __name__ == "__main__":
    Trainer.train = lambda self: {}  # finished at once
    train.define_flags()
    flags.FLAGS(sys.argv)
    code = train.main(sys.argv[:1])
    print("main", code, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    print("survived", flush=True)
