"""A full disk for tests of what alf does when it fills.

Imported by a gin file (``import full_disk``) in a process whose environment
sets ``ALF_TEST_DISK_ROOM``, it makes every checkpoint write fail with ENOSPC
after that many bytes of the file. Imported elsewhere, it only defines
`FullDisk`."""
import errno
import os

import alf.trainers.checkpointer as checkpointer


class FullDisk:
    """A file whose writes stop after ``room`` bytes with ENOSPC."""

    def __init__(self, path, mode, room):
        self._f = open(path, mode)
        self._room = room

    def write(self, data):
        data = bytes(data)
        if len(data) > self._room:
            self._f.write(data[:self._room])
            self._f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


if "ALF_TEST_DISK_ROOM" in os.environ:
    # The checkpointer's own `open` only: eval.csv and summaries still write.
    checkpointer.open = lambda path, mode: FullDisk(
        path, mode, int(os.environ["ALF_TEST_DISK_ROOM"]))
