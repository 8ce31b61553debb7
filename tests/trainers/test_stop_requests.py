"""Tests of alf/trainers/stop_requests.py: signals become requests, and
the ranks agree on them (the CLI's signal tests are in tests/bin)."""
import os
import signal

import pytest

from alf.trainers import stop_requests
from alf.trainers.stop_requests import StopRequests, install_handlers


def test_a_checkpoint_request_during_the_agreement_is_not_lost(
        monkeypatch):
    """SIGUSR1 can land while `agree` waits in its all-reduce (every rank
    gets the signal at once, and they wait there together): it must be
    served at the next iteration, not cleared with the one just agreed."""
    requests = StopRequests()
    real = stop_requests.distributed.all_reduce_max
    landed = []

    def signal_during(tensor):
        if not landed:
            landed.append(1)
            requests.request_checkpoint()  # what the handler does
        return real(tensor)

    monkeypatch.setattr(stop_requests.distributed, "all_reduce_max",
                        signal_during)
    assert requests.agree() == (0, False)
    assert requests.agree() == (0, True)
    assert requests.agree() == (0, False)


def test_the_first_stop_signal_is_the_one_kept():
    requests = StopRequests()
    assert requests.agree() == (0, False)
    requests.request_stop(signal.SIGTERM)
    requests.request_stop(signal.SIGINT)
    assert requests.signal == signal.SIGTERM
    assert requests.agree() == (signal.SIGTERM, False)


def test_handlers_turn_signals_into_requests_and_are_restored():
    before = {s: signal.getsignal(s)
              for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    requests = StopRequests()
    restore = install_handlers(requests, world_size=1, is_chief=True)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert requests.agree() == (0, True)
        os.kill(os.getpid(), signal.SIGTERM)
        assert requests.signal == signal.SIGTERM
        # A repeated Ctrl-C in a single process interrupts at once.
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        restore()
    assert {s: signal.getsignal(s) for s in before} == before


def test_under_a_launcher_repeated_signals_are_ignored():
    requests = StopRequests()
    restore = install_handlers(requests, world_size=2, is_chief=False)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt
        assert requests.signal == signal.SIGINT
    finally:
        restore()


@pytest.mark.parametrize("module, handler, sig, raised", [
    ("alf.bin.train", "_stop_starting", signal.SIGTERM, "_StartupStopped"),
    ("alf.bin.launch", "_on_stop_signal", signal.SIGTERM, "SystemExit"),
    ("alf.utils.process", "interrupt_unless_stopping", signal.SIGINT,
     "KeyboardInterrupt")])
def test_a_repeat_after_a_stop_is_not_a_stop_before_training(
        module, handler, sig, raised, monkeypatch):
    """What stands before and after training (the CLI's handler, a launcher
    rank's) ends the process on a stop signal, unless training already
    stopped on one: then the repeat (a torchrun agent's dying threads each
    send the parent-death signal; the launcher forwards the terminal's
    Ctrl-C) must not turn a checkpointed stop into "stopped before
    training", nor break off the lock's release."""
    import builtins
    import importlib
    cli = importlib.import_module(module)
    from alf.utils import process
    expected = getattr(cli, raised, None) or getattr(builtins, raised)
    # Each case is a process of its own: a stop raised once there is not
    # raised again (`process.raise_stop_once`).
    monkeypatch.setattr(process, "_stop_raised", False)
    previous = signal.signal(sig, getattr(cli, handler))
    try:
        restore = install_handlers(StopRequests(), 2, is_chief=False)
        restore()  # a training that was not stopped
        with pytest.raises(expected):
            os.kill(os.getpid(), sig)
        restore = install_handlers(StopRequests(), 2, is_chief=False)
        os.kill(os.getpid(), sig)  # training's stop
        restore()
        os.kill(os.getpid(), sig)  # the repeat: ignored
    finally:
        signal.signal(sig, previous)
        install_handlers(StopRequests(), 1, is_chief=False)()
