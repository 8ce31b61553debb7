"""Stop and checkpoint requests (signals), agreed by every rank."""
import signal
import threading
from typing import Callable, Tuple

import torch
from absl import logging

from alf.utils import distributed, process


class StopRequests:
    """What the signals asked of training: stop (Ctrl-C, SIGTERM, SIGHUP)
    or take a checkpoint (SIGUSR1), after the current iteration.

    Attributes:
        signal: the stop signal received or agreed on, 0 while none.
    """

    def __init__(self):
        self.signal = 0
        # SIGUSR1s received, and those a checkpoint was taken for. Only the
        # handler writes the first: a signal that lands while `agree`
        # waits in its all-reduce is then served next time, not lost.
        self._checkpoints_asked = 0
        self._checkpoints_served = 0

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Asks training to stop (and checkpoint) after this iteration."""
        self.signal = self.signal or int(signum)

    def request_checkpoint(self) -> None:
        """Asks for a checkpoint after this iteration; training goes on."""
        self._checkpoints_asked += 1

    def agree(self) -> Tuple[int, bool]:
        """(stop signal or 0, checkpoint now?), agreed by every rank.

        A control-flow decision: all ranks stop (or checkpoint) at the same
        iteration if any of them was asked to, whichever rank the signal
        reached; one all-reduce of three numbers (`agree_with`'s).
        """
        return self.agree_with(False)[:2]

    def agree_with(self, failed: bool) -> Tuple[int, bool, bool]:
        """`agree`, and whether any rank ``failed`` (a helper process of
        its, such as rank 0's evaluator, died), in the same all-reduce."""
        asked = self._checkpoints_asked
        flags = distributed.all_reduce_max(torch.tensor(
            [float(self.signal), float(asked > self._checkpoints_served),
             float(failed)]))
        self._checkpoints_served = asked
        if flags[0] and not self.signal:
            self.signal = int(flags[0])
        return int(flags[0]), bool(flags[1]), bool(flags[2])


def install_handlers(requests: StopRequests, world_size: int,
                     is_chief: bool) -> Callable[[], None]:
    """Makes the stop signals (Ctrl-C, SIGTERM, SIGHUP) ask ``requests`` to
    stop, and SIGUSR1 to checkpoint.

    In a single process a second Ctrl-C interrupts at once (the checkpoint is
    still saved). Under a launcher, every rank gets the signal (from the
    terminal, the scheduler and/or the launcher); repeats are ignored and the
    launcher aborts a rank that does not stop in time.

    Args:
        requests: where the signals' requests go.
        world_size: the number of ranks.
        is_chief: whether this rank speaks on the console.

    Returns:
        A function that restores the previous handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    force_on_repeat = world_size == 1

    def stop(signum, frame):
        process.note_stop(signum)
        if requests.signal:
            if force_on_repeat and signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        requests.request_stop(signum)
        if is_chief:
            logging.warning("%s: stopping after this iteration%s",
                            process.signal_name(signum),
                            " (Ctrl-C again to stop at once)"
                            if force_on_repeat and signum == signal.SIGINT
                            else "")

    def checkpoint(signum, frame):
        requests.request_checkpoint()

    process.forget_stop()
    previous = {s: signal.signal(s, stop) for s in process.STOP_SIGNALS}
    previous[process.CHECKPOINT_SIGNAL] = signal.signal(
        process.CHECKPOINT_SIGNAL, checkpoint)

    def restore():
        for s, h in previous.items():
            signal.signal(s, h)

    return restore
