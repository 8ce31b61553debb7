"""alf.utils.process: processes started with the run's signals held, and
the starting process losing none of them."""
import multiprocessing as mp
import os
import signal

import pytest

from alf.utils import process

pytestmark = pytest.mark.timeout(60)


def _report_and_release(conn):
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    got = []
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    conn.recv()  # the parent has signalled this process
    process.release_run_signals()
    conn.send((sorted(int(s) for s in blocked), got))


def test_a_child_holds_the_run_signals_until_it_releases_them():
    """Before, a Ctrl-C to the process group while a spawned actor (or
    rank) imported ended it with a KeyboardInterrupt traceback; and a rank
    that died so left its peers waiting in gloo's rendezvous."""
    got = []
    before = (signal.getsignal(signal.SIGTERM),
              signal.pthread_sigmask(signal.SIG_BLOCK, []))
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        ctx = mp.get_context("spawn")
        mine, theirs = ctx.Pipe()
        with process.run_signals_held():
            child = ctx.Process(target=_report_and_release, args=(theirs, ))
            child.start()
            # Held in this thread; another thread that does not block it
            # (pytest-xdist's) may take it at once: either way, not lost.
            os.kill(os.getpid(), signal.SIGTERM)
        assert got == [signal.SIGTERM]
        os.kill(child.pid, signal.SIGTERM)  # while it holds them
        mine.send("signalled")
        blocked, child_got = mine.recv()
        child.join(30)
        assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= set(blocked)
        assert child_got == [signal.SIGTERM]  # delivered once released
    finally:
        signal.signal(signal.SIGTERM, before[0])
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before[1]


_KILLED_HOLDING_A_SEMAPHORE = """
import multiprocessing as mp, os, signal
from alf.utils import process
def child():
    lock = mp.get_context("spawn").Lock()  # registered with the tracker
    os.kill(os.getpid(), signal.SIGKILL)
if __name__ == "__main__":
    with process.run_signals_held():
        p = mp.get_context("spawn").Process(target=child)
        p.start()
    p.join()
    print(p.exitcode)
"""


def test_a_killed_childs_semaphores_are_removed_without_a_warning(tmp_path):
    """After a killed evaluator (its environment workers' queues), the
    tracker warned of 'leaked semaphore objects' under the one line that
    names the failure."""
    import subprocess
    import sys
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_HOLDING_A_SEMAPHORE)
    res = subprocess.run([sys.executable, str(script)], capture_output=True,
                         text=True, timeout=50)
    assert res.stdout == "-9\n", res.stderr
    assert res.stderr == "", res.stderr


_IMPORT_UNDER_SIGTERM = """
import os, signal, sys
class Stop(BaseException):
    pass
def stop(signum, frame):
    raise Stop()
signal.signal(signal.SIGTERM, stop)
class Trip:  # a SIGTERM as torch's import reaches numpy
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None
sys.meta_path.insert(0, Trip())
from alf.utils import process
try:
    process.import_torch()
    print("lost")
except Stop:
    import numpy
    print("stopped", "torch" in sys.modules, hasattr(numpy, "matrix"))
"""


def test_a_stop_while_torch_imports_is_handled_after_it():
    """torch's C code imports numpy and swallows what a handler raises
    there: a SIGTERM landing then was lost (a run stopped in its first
    second trained on, then failed on a half-imported numpy)."""
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-c", _IMPORT_UNDER_SIGTERM],
                         capture_output=True, text=True, timeout=50)
    assert res.stdout.split() == ["stopped", "True", "True"], res.stderr


def test_a_repeated_stop_signal_raises_once(monkeypatch):
    """The terminal's Ctrl-C and the launcher's forward reach a starting
    rank together: the second one landed in the first one's clean-up (its
    one line) and printed pages of tracebacks."""
    from alf.bin import launch
    monkeypatch.setattr(process, "_stop_raised", False)
    with pytest.raises(SystemExit) as info:
        launch._on_stop_signal(signal.SIGTERM, None)
    assert info.value.code == 143
    # Repeats, of either kind, while it unwinds: nothing raised.
    process.interrupt_unless_stopping(signal.SIGINT, None)
    launch._on_stop_signal(signal.SIGTERM, None)
    monkeypatch.setattr(process, "_stop_raised", False)
    with pytest.raises(KeyboardInterrupt):
        process.interrupt_unless_stopping(signal.SIGINT, None)
