"""One training at a time in a root dir: the lock, its holder's line, and
its release when the holder ends, killed or not."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from alf.trainers.run_lock import LOCK_FILE, RootDirInUse, RunLock

pytestmark = pytest.mark.timeout(60)


def test_a_second_hold_is_refused_naming_the_first(tmp_path):
    first = RunLock.acquire(str(tmp_path / "run"))  # creates the folder
    with pytest.raises(RootDirInUse) as e:
        RunLock.acquire(str(tmp_path / "run"))
    message = str(e.value)
    assert "\n" not in message
    assert f"pid {os.getpid()} on " in message
    assert "choose another --root_dir" in message
    first.release()
    first.release()  # idempotent
    RunLock.acquire(str(tmp_path / "run")).release()
    assert os.listdir(tmp_path / "run") == []  # as before the run


def test_a_lock_that_cannot_be_removed_is_released(tmp_path, monkeypatch):
    """A root dir made read-only during the run: before, the release's
    PermissionError replaced the run's own exit (a stop's 130, a one-line
    write error) with a traceback and exit 1."""
    root = str(tmp_path / "run")
    lock = RunLock.acquire(root)

    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    with monkeypatch.context() as m:
        m.setattr(os, "remove", refuse)
        lock.release()
    assert os.listdir(root) == [LOCK_FILE]  # left behind, unlocked
    RunLock.acquire(root).release()
    assert os.listdir(root) == []


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from alf.trainers.run_lock import RunLock
            RunLock.acquire({str(tmp_path)!r})
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RootDirInUse, match=f"pid {holder.pid} on "):
            RunLock.acquire(str(tmp_path))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    # The killed holder's file is left, naming it, and blocks nothing.
    assert f"pid {holder.pid} on " in (tmp_path / LOCK_FILE).read_text()
    lock = RunLock.acquire(str(tmp_path))
    assert f"pid {os.getpid()} on " in (tmp_path / LOCK_FILE).read_text()
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_hold_on_a_removed_file_is_not_the_lock(tmp_path, monkeypatch):
    """The holder may remove the file between another process's open and
    its flock: that flock then holds a file that is no longer the lock,
    and the acquire must start again on the new one."""
    import fcntl

    from alf.trainers import run_lock
    real, calls = fcntl.flock, []

    def flock_after_the_holder_ended(fd, op):
        if not calls:
            os.remove(tmp_path / LOCK_FILE)  # the holder's release
        calls.append(fd)
        return real(fd, op)

    RunLock.acquire(str(tmp_path)).release()
    open(tmp_path / LOCK_FILE, "w").close()  # a holder's file, opened next
    monkeypatch.setattr(run_lock.fcntl, "flock", flock_after_the_holder_ended)
    lock = RunLock.acquire(str(tmp_path))
    monkeypatch.undo()
    assert len(calls) == 2  # the removed file, then the new one
    assert f"pid {os.getpid()} on " in (tmp_path / LOCK_FILE).read_text()
    with pytest.raises(RootDirInUse):
        RunLock.acquire(str(tmp_path))
    lock.release()


def test_a_filesystem_without_locks_trains_unguarded(tmp_path, monkeypatch,
                                                     caplog):
    import errno

    from alf.trainers import run_lock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_lock.fcntl, "flock", no_locks)
    with caplog.at_level("WARNING"):
        lock = RunLock.acquire(str(tmp_path))
    assert "cannot lock" in caplog.text and "No locks available" in \
        caplog.text
    lock.release()
    assert os.listdir(tmp_path) == []
