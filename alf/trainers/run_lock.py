"""One training at a time in a root dir.

Two trainings in one ``--root_dir`` (a command run twice, a comparison
rerun in a second terminal) would both append to ``eval.csv``, write the
same checkpoints and mix their summaries: the run a user already has would
be spoilt. The chief (rank 0) holds an exclusive ``flock`` on
``ROOT_DIR/.alf-run.lock`` while it trains; a second training there stops
before it builds anything, with one line naming the holder.

``flock`` belongs to the open file, so the operating system releases it
when the holder exits, killed or not: a crashed run never blocks the next
one (its file stays, naming it, until the next holder takes it over). A
holder that ends removes the file, still holding it: a root dir looks as
it did before the run, and one that opened the file meanwhile sees, once
it holds it, that it is no longer the root dir's and starts again.
"""
import errno
import fcntl
import os
import socket
import sys
import time
from typing import Optional

from absl import logging

from alf.utils.errors import AlfError

#: The lock's file in a root dir.
LOCK_FILE = ".alf-run.lock"
# What flock raises where the filesystem has no locks.
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class RootDirInUse(AlfError):
    """Another training holds the root dir."""


class RunLock:
    """The chief's hold on a root dir (`acquire`, then `release`)."""

    def __init__(self, fd: Optional[int], path: str):
        self._fd: Optional[int] = fd
        self._path = path

    @classmethod
    def acquire(cls, root_dir: str) -> "RunLock":
        """Takes ``root_dir``'s lock and writes who holds it.

        Raises:
            RootDirInUse: another process holds it (its pid, host, start
                time and command are named).
        """
        os.makedirs(root_dir, exist_ok=True)
        path = os.path.join(root_dir, LOCK_FILE)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(
                    errors="replace").strip()
                os.close(fd)
                raise RootDirInUse(
                    f"--root_dir {root_dir} is in use by another training "
                    f"({holder or 'its holder is still starting'}); wait "
                    "for it to end, stop it, or choose another --root_dir"
                ) from None
            except OSError as e:
                os.close(fd)
                if e.errno not in _NO_LOCKS:
                    raise
                _remove(path)
                # Some network and FUSE filesystems have no locks: training
                # goes on there, unguarded, rather than not at all.
                logging.warning(
                    "cannot lock %s on its filesystem (%s): a second "
                    "training in this root dir would not be refused", path,
                    e.strerror or e)
                return cls(None, path)
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, path):
                break
            # The holder removed the file as we opened it: that one is no
            # longer the lock.
            os.close(fd)
        lock = cls(fd, path)
        who = (f"pid {os.getpid()} on {socket.gethostname()} since "
               f"{time.strftime('%Y-%m-%d %H:%M:%S')}: "
               f"{' '.join(sys.argv)[:300]}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, who.encode(), 0)
        return lock

    @classmethod
    def check_free(cls, root_dir: str) -> None:
        """Fails now, as `acquire` would, if another training holds
        ``root_dir``: a launcher checks before it starts ranks, whose
        chief then takes the lock (a rank that fails while its peers
        connect makes them print errors of their own).

        Raises:
            RootDirInUse: as `acquire`.
        """
        cls.acquire(root_dir).release()

    def release(self) -> None:
        """Removes the file and lets another training use the root dir
        (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                # Removed while still held: whoever opened it meanwhile
                # finds it gone once it gets the flock, and retries.
                _remove(self._path)
            except OSError:
                # A root dir made read-only: the file stays, unlocked (the
                # next training takes it over); the run's own error or
                # exit code must not turn into this one.
                pass
            finally:
                os.close(fd)  # closing the file releases its flock


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
