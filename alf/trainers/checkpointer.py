"""Atomic, code-free checkpoints under ``ROOT_DIR/ckpt/``."""
import errno
import glob
import json
import os
import re
import shutil
import time
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple, cast

import torch

from alf.utils.errors import CheckpointError

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")
_LOCAL = re.compile(r"^local-(\d+)-rank(\d+)\.pt$")
#: The best evaluation's checkpoint and its record, beside the others.
BEST, BEST_INFO = "best.pt", "best.json"


class Checkpointer:
    """Saves and finds checkpoints named ``ckpt-<env_steps>.pt``.

    Writes go to a temporary file that is fsynced and then renamed, so a crash
    mid-write never leaves a partial file under a checkpoint's name. Loads use
    ``torch.load(weights_only=True)``: a checkpoint cannot run code.

    Args:
        ckpt_dir: the folder of checkpoints.
        max_to_keep: delete older checkpoints beyond this many (None: keep
            all).
    """

    def __init__(self, ckpt_dir: str, max_to_keep: Optional[int] = 5):
        self.ckpt_dir = ckpt_dir
        self.max_to_keep = max_to_keep

    def saved(self) -> Dict[int, str]:
        """The regular checkpoints, env steps -> path, oldest first
        (``best.pt`` is not one of them)."""
        found = []
        for path in glob.glob(os.path.join(self.ckpt_dir, "ckpt-*.pt")):
            m = _NAME.match(os.path.basename(path))
            if m:
                found.append((int(m.group(1)), path))
        return dict(sorted(found))

    def _all(self):
        return list(self.saved().values())

    def latest(self) -> Optional[str]:
        """Path of the newest checkpoint, or None."""
        paths = self._all()
        return paths[-1] if paths else None

    def save(self, state: Dict[str, Any], env_steps: int) -> str:
        """Writes ``state`` atomically as ``ckpt-<env_steps>.pt``.

        Raises:
            CheckpointError: if the file cannot be written (a full disk, a
                quota, an I/O error), naming it and the bytes free; the
                temporary file is removed and earlier checkpoints are left
                as they were.
        """
        path = os.path.join(self.ckpt_dir, f"ckpt-{env_steps}.pt")
        self._write(state, path)
        if self.max_to_keep:
            for old in self._all()[:-self.max_to_keep]:
                os.remove(old)
        return path

    def save_best(self, state: Dict[str, Any], env_steps: int, metric: str,
                  value: float) -> str:
        """Writes ``state`` atomically as ``best.pt`` (never deleted for
        newer checkpoints), and ``best.json`` with the evaluation it
        scored; returns the path."""
        path = os.path.join(self.ckpt_dir, BEST)
        self._write(state, path)
        info = json.dumps({"env_steps": env_steps, "metric": metric,
                           "value": value})
        tmp = os.path.join(self.ckpt_dir, BEST_INFO + ".tmp")
        with open(tmp, "w") as f:
            f.write(info + "\n")
        os.replace(tmp, os.path.join(self.ckpt_dir, BEST_INFO))
        return path

    def best(self) -> Optional[Dict[str, Any]]:
        """``best.json``'s record (``env_steps``, ``metric``, ``value``,
        and ``path``), or None before any best checkpoint (or without a
        readable record)."""
        return self.best_record()[0]

    def best_record(self) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        """(`best`'s record, None), or (None, what is wrong with it) where
        ``best.pt`` exists but its record cannot be read (a crash or an
        edit can leave it so); (None, None) without a ``best.pt``."""
        path = os.path.join(self.ckpt_dir, BEST)
        if not os.path.exists(path):
            return None, None
        record, problem = self._best_info()
        return (None if record is None else dict(record, path=path)), problem

    def set_aside_best(self, env_steps: int) -> Optional[str]:
        """Moves ``best.pt`` and ``best.json`` to
        ``best-discarded-<time>.pt`` and ``.json`` if the best evaluation
        was after ``env_steps``: a run resumed at ``env_steps`` discards
        the training it came from (as it sets aside ``eval.csv``'s rows
        after ``env_steps``), so its best is chosen again
        (`RunState`: the best of the evaluations it keeps).

        Returns:
            Where ``best.pt`` went, or None if nothing was moved.
        """
        info, _ = self._best_info()
        if info is None or not info["env_steps"] > env_steps:
            return None  # none, or not alf's record: leave it be
        stem = aside_name(self.ckpt_dir, "best-discarded", (".pt", ".json"))
        # best.pt first: a crash in between leaves best.json without its
        # checkpoint, which `best` ignores; the other way round a new best
        # would overwrite the discarded best.pt.
        for name, ext in ((BEST, ".pt"), (BEST_INFO, ".json")):
            path = os.path.join(self.ckpt_dir, name)
            if os.path.exists(path):
                os.replace(path, stem + ext)
        return stem + ".pt"

    def local_path(self, env_steps: int, rank: int) -> str:
        """Where rank ``rank`` keeps its own state (`save_local`) for the
        checkpoint at ``env_steps``."""
        return os.path.join(self.ckpt_dir,
                            f"local-{env_steps}-rank{rank}.pt")

    def save_local(self, state: Dict[str, Any], env_steps: int, rank: int,
                   world_size: int) -> str:
        """Writes a rank's own state (`RLAlgorithm.local_state`) for the
        checkpoint at ``env_steps`` atomically, then deletes the rank's
        older ones but the previous, its later ones (from training a
        resumed run discarded), and on rank 0 those of ranks the run no
        longer has, with rank 0's own of the same step: they can be the
        size of a replay buffer. The previous one stays for the previous
        checkpoint, which a resume uses if rank 0 fails to write this one
        (ranks do not wait for each other here); so does a set saved by
        more ranks than this run has, whole, as long as rank 0's part does
        (a run resumed by mistake with fewer processes leaves the set for
        a resume with as many as saved it).

        Raises:
            CheckpointError: as `save`.
        """
        path = self.local_path(env_steps, rank)
        try:
            self._write({"format": 1, "env_steps": env_steps, "rank": rank,
                         "world_size": world_size, "state": state}, path)
        except CheckpointError as e:
            if not isinstance(e.__cause__, OSError) or e.__cause__.errno not in (
                    errno.ENOSPC, errno.EDQUOT):
                raise
            raise CheckpointError(
                f"{e}; or train without saving replay buffers "
                "(TrainerConfig.checkpoint_replay=False)") from e
        mine, gone_ranks = [], []
        for old in glob.glob(os.path.join(self.ckpt_dir, "local-*-rank*.pt")):
            m = _LOCAL.match(os.path.basename(old))
            if not m:
                continue
            steps, owner = int(m.group(1)), int(m.group(2))
            if owner == rank and steps > env_steps:
                _remove_quietly(old)  # else kept as "the previous"
            elif owner == rank:
                mine.append((steps, old))
            elif rank == 0 and owner >= world_size:
                gone_ranks.append((steps, old))
        mine.sort()
        for _, old in mine[:-2]:
            _remove_quietly(old)
        kept = {steps for steps, _ in mine[-2:]}
        for steps, old in gone_ranks:
            if steps not in kept:
                _remove_quietly(old)
        return path

    def load_local(self, env_steps: int, rank: int, world_size: int
                   ) -> Optional[Dict[str, Any]]:
        """Rank ``rank``'s own state saved with the checkpoint at
        ``env_steps`` by a run of ``world_size`` ranks, or None if there is
        none.

        Raises:
            CheckpointError: the file is unreadable or from a run of
                another number of ranks (naming it).
        """
        path = self.local_path(env_steps, rank)
        if not os.path.exists(path):
            return None
        saved = Checkpointer.load(path, advice="it is ignored")
        n = saved.get("world_size")
        if not isinstance(n, int) or not isinstance(saved.get("state"),
                                                    dict):
            raise CheckpointError(
                f"{path} is not a rank's saved state (it lacks "
                "'world_size' or 'state'); it is ignored")
        if n != world_size:
            raise CheckpointError(
                f"{path} was saved by a run of {n} "
                f"process{'' if n == 1 else 'es'}, not {world_size}; it is "
                "ignored")
        return saved["state"]

    def remove_partial_writes(self) -> List[str]:
        """Removes the temporary files of writes that a killed process
        left (``*.tmp``; one run at a time writes here, so none is in
        progress when it starts); returns their names."""
        gone = []
        for path in glob.glob(os.path.join(self.ckpt_dir, "*.tmp")):
            _remove_quietly(path)
            gone.append(os.path.basename(path))
        return gone

    def _best_info(self) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        """(``best.json``'s record, its ``env_steps`` an int, None), or
        (None, what is wrong with it)."""
        info = os.path.join(self.ckpt_dir, BEST_INFO)
        try:
            with open(info, "r") as f:
                text = f.read()
        except FileNotFoundError:
            return None, f"{info} (best.pt's record) is missing"
        except OSError as e:
            return None, f"{info} is unreadable ({e.strerror or e})"
        try:
            record = json.loads(text)
            return dict(record, env_steps=int(record["env_steps"])), None
        except (ValueError, TypeError, KeyError):
            # Not JSON, or JSON without alf's env_steps.
            return None, f"{info} is unreadable (not alf's best.json)"

    def _write(self, state: Dict[str, Any], path: str) -> None:
        tmp = path + ".tmp"
        try:
            os.makedirs(self.ckpt_dir, exist_ok=True)
            with open(tmp, "wb") as f:
                # Streamed to the file, not serialised in memory first: a
                # replay buffer's file would double the process's memory.
                recorder = _WriteRecorder(f)
                try:
                    torch.save(state, cast(IO[bytes], recorder))
                except RuntimeError as e:
                    # torch's writer turns the file's OSError (or a
                    # Ctrl-C) into a RuntimeError: the recorder kept it.
                    if recorder.error is None:
                        raise
                    raise recorder.error from e
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as e:  # noqa: BLE001 - Ctrl-C mid-write too
            _remove_quietly(tmp)
            if isinstance(e, OSError):
                raise CheckpointError(_write_failure(
                    path, _tensor_bytes(state), e)) from e
            raise

    @staticmethod
    def load(path: str, layout: Optional[Dict[str, Any]] = None,
             advice: Optional[str] = None) -> Dict[str, Any]:
        """Reads a checkpoint.

        Args:
            path: the checkpoint file.
            layout: what the checkpoint must hold (see `check_layout`).
            advice: what the error tells the user to do instead; None:
                training's (resume from an older checkpoint or use another
                root dir).

        Raises:
            CheckpointError: if the file cannot be read or does not have
                ``layout``; the file is left untouched.
        """
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError as e:
            raise CheckpointError(
                f"checkpoint {path} is gone (a run still training keeps "
                "only its last TrainerConfig.max_checkpoints); "
                f"{advice or _resume_advice(path)}") from e
        except OSError as e:  # not the file's content: say what it is
            raise CheckpointError(
                f"checkpoint {path} cannot be read ({e.strerror or e}); "
                f"{advice or _resume_advice(path)}") from e
        except Exception as e:  # noqa: BLE001 - any failure means unusable
            raise CheckpointError(
                f"checkpoint {path} is unreadable ({type(e).__name__}: not a "
                "complete weights-only checkpoint; it is corrupt or holds "
                f"Python objects); {advice or _resume_advice(path)}") from e
        problem = check_layout(state, layout) if layout else None
        if problem:
            raise CheckpointError(
                f"checkpoint {path} is not a checkpoint of this trainer "
                f"({problem}); {advice or _resume_advice(path)}")
        return state


def aside_name(folder: str, stem: str, extensions: Sequence[str]) -> str:
    """``FOLDER/<stem>-<time>``, or with ``-2``, ``-3``... appended, the
    first for which no file with any of ``extensions`` exists: where to
    move files aside without overwriting what an earlier one moved there.
    """
    base = os.path.join(folder, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    name, n = base, 1
    while any(os.path.exists(name + ext) for ext in extensions):
        n += 1
        name = f"{base}-{n}"
    return name


def _resume_advice(path: str) -> str:
    return (f"refusing to resume. Move it out of {os.path.dirname(path)} "
            "to resume from an older one, or use another --root_dir")


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # never written, or the disk is gone: nothing more to do


def free_space(folder: str) -> str:
    """``"N bytes free"`` on ``folder``'s file system, for a message about a
    write that failed there."""
    try:
        return f"{shutil.disk_usage(folder).free} bytes free"
    except OSError:
        return "free space unknown"


#: A write into ROOT_DIR that fails for these is the disk's (or the
#: files' permissions') fault, not a bug; and what the user can do.
WRITE_ADVICE: Dict[Optional[int], str] = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space within your disk quota",
    errno.EACCES: "give this user write permission to it",
    errno.EPERM: "make it writable (check its owner, mode and attributes: "
                 "ls -l, lsattr)",
    errno.EROFS: "remount the file system read-write",
    errno.EIO: "check the disk (the kernel log says more)",
}


class _WriteRecorder:
    """A file for `torch.save` that keeps what interrupted a write (an
    OSError, a KeyboardInterrupt), which torch re-raises as a RuntimeError
    (without the OSError's errno)."""

    def __init__(self, f):
        self._f = f
        # A Ctrl-C during the write too: torch replaces it with its own
        # RuntimeError when its zip writer closes the file.
        self.error: Optional[BaseException] = None

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except BaseException as e:
            self.error = e
            raise

    def flush(self) -> None:
        self._f.flush()


def _tensor_bytes(state: Any) -> int:
    """The bytes of the tensors in ``state`` (nested dicts, lists, tuples):
    about the size of its checkpoint file."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(_tensor_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_tensor_bytes(v) for v in state)
    return 0


def _write_failure(path: str, size: int, error: OSError) -> str:
    """The one-line message of a checkpoint write that failed."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    what = "the disk is full" if full else "the write failed"
    # More than its tensors: the file's index and pickled structure add
    # to them (a small checkpoint's 115 kB of tensors took 129 kB).
    need = (f"; it needs more than its tensors' {size} bytes, "
            f"{free_space(os.path.dirname(path))}" if full else "")
    advice = WRITE_ADVICE.get(error.errno, "check the folder")
    earlier = glob.glob(os.path.join(os.path.dirname(path), "ckpt-*.pt"))
    kept = ("earlier checkpoints are untouched" if earlier else
            "the run has no checkpoint yet")
    then = "resume" if earlier else "start again"
    return (f"cannot write checkpoint {path}: {what} ({error.strerror or error}"
            f"{need}); nothing was saved and {kept}; {advice} (or use another "
            f"--root_dir) and run the same command to {then}")


def check_layout(state: Any, layout: Dict[str, Any],
                 prefix: str = "") -> Optional[str]:
    """What is wrong with ``state``'s structure, or None.

    Args:
        state: what a checkpoint file held.
        layout: key -> the type its value must have, or a nested layout for
            a dict value.
        prefix: the path of ``state`` in the checkpoint, for the message.
    """
    if not isinstance(state, dict):
        where = repr(prefix.rstrip(".")) if prefix else "it"
        return (f"{where} is a {type(state).__name__}, not a dict with "
                f"{', '.join(map(repr, layout))}")
    for key, expected in layout.items():
        name = prefix + key
        if key not in state:
            return (f"no {name!r} in it; it has "
                    f"{', '.join(map(repr, state)) or 'nothing'}")
        if isinstance(expected, dict):
            problem = check_layout(state[key], expected, name + ".")
            if problem:
                return problem
        elif not isinstance(state[key], expected) or (
                expected is int and isinstance(state[key], bool)):
            return (f"{name!r} is a {type(state[key]).__name__}, not a "
                    f"{expected.__name__}")
    return None


def describe_mismatch(checkpoint: Dict[str, torch.Tensor],
                      current: Dict[str, torch.Tensor]) -> Optional[str]:
    """How a checkpoint's state dict differs from the model's, in a line:
    the first difference and how many others there are; None if the names
    and shapes agree."""
    problems = [
        f"size mismatch for {k}: checkpoint {list(v.shape)}, this config "
        f"{list(current[k].shape)}" for k, v in checkpoint.items()
        if k in current and isinstance(v, torch.Tensor)
        and isinstance(current[k], torch.Tensor) and v.shape != current[k].shape]
    problems += [f"{k} is missing from the checkpoint"
                 for k in current if k not in checkpoint]
    problems += [f"{k} is in the checkpoint but not in this config"
                 for k in checkpoint if k not in current]
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return problems[0] + more
