"""What a root dir's entries must be for a run to start or resume there.

A run's files are found by name: ``ckpt/`` (a folder the run writes
checkpoints into), ``config.gin`` and the evaluation logs (files). An entry
of another kind (a ``ckpt`` link to storage that is not mounted, a file
where the folder was, a folder where a log was) used to be met only when
it was written: a ``ckpt`` the run could not list looked like a fresh run,
which set the evaluation log's rows aside, trained, and failed at its
first checkpoint ("File exists"). `check_run_folder` refuses such a root
dir in one line before anything is written.
"""
import os

from alf.trainers.calibration import CALIBRATION_CSV
from alf.trainers.checkpointer import BEST_INFO, WRITE_ADVICE
from alf.trainers.evaluator import EVAL_CSV, HELD_OUT_CSV
from alf.utils.errors import AlfError

#: The folder of checkpoints in a root dir.
CKPT_DIR = "ckpt"
#: The files a run reads back (as well as writes) in a root dir.
RUN_FILES = ("config.gin", EVAL_CSV, HELD_OUT_CSV, CALIBRATION_CSV)


def check_run_folder(root_dir: str) -> None:
    """Refuses a root dir whose checkpoint folder cannot be listed and
    written, or whose run files are not files.

    Raises:
        AlfError: one line naming the entry, what it is and what to do.
    """
    ckpt = os.path.join(root_dir, CKPT_DIR)
    if os.path.islink(ckpt) and not os.path.exists(ckpt):
        raise AlfError(
            f"{ckpt} is a link to {os.readlink(ckpt)}, which does not exist "
            "(storage not mounted?): its checkpoints cannot be read; mount "
            "it, or remove the link to train afresh")
    if os.path.lexists(ckpt) and not os.path.isdir(ckpt):
        raise AlfError(f"{ckpt} is a file, not the run's folder of "
                       "checkpoints; move it away")
    for name in RUN_FILES:
        path = os.path.join(root_dir, name)
        if os.path.isdir(path):
            raise AlfError(f"{path} is a folder, not the run's {name}; move "
                           "it away")
    best_info = os.path.join(ckpt, BEST_INFO)
    if os.path.isdir(best_info):
        raise AlfError(f"{best_info} is a folder, not the run's {BEST_INFO}; "
                       "move it away")
    if os.path.isdir(ckpt):
        _check_writable(ckpt)


def probe_write(folder: str) -> None:
    """Writes and removes a file in ``folder``: the only sure test that
    files can be made there (permission bits say nothing of a read-only
    mount or an immutable folder).

    Raises:
        OSError: as the write or the removal raised it.
    """
    probe = os.path.join(folder, f".write-test-{os.getpid()}")
    with open(probe, "w"):
        pass
    os.remove(probe)


def _check_writable(folder: str) -> None:
    try:
        probe_write(folder)
    except OSError as e:
        advice = WRITE_ADVICE.get(e.errno, "make it writable")
        raise AlfError(f"{folder} is not writable ({e.strerror or e}): no "
                       f"checkpoint could be saved; {advice}") from e
