"""Atomic, code-free checkpoints under ``ROOT_DIR/ckpt/``."""
import glob
import os
import re
from typing import Any, Dict, Optional

import torch

from alf.utils.errors import CheckpointError

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


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

    def _all(self):
        found = []
        for path in glob.glob(os.path.join(self.ckpt_dir, "ckpt-*.pt")):
            m = _NAME.match(os.path.basename(path))
            if m:
                found.append((int(m.group(1)), path))
        return [p for _, p in sorted(found)]

    def latest(self) -> Optional[str]:
        """Path of the newest checkpoint, or None."""
        paths = self._all()
        return paths[-1] if paths else None

    def save(self, state: Dict[str, Any], env_steps: int) -> str:
        """Writes ``state`` atomically as ``ckpt-<env_steps>.pt``."""
        os.makedirs(self.ckpt_dir, exist_ok=True)
        path = os.path.join(self.ckpt_dir, f"ckpt-{env_steps}.pt")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        if self.max_to_keep:
            for old in self._all()[:-self.max_to_keep]:
                os.remove(old)
        return path

    @staticmethod
    def load(path: str) -> Dict[str, Any]:
        """Reads a checkpoint.

        Raises:
            CheckpointError: if the file cannot be read; the file is left
                untouched.
        """
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any failure means unusable
            raise CheckpointError(
                f"checkpoint {path} is unreadable ({type(e).__name__}: not a "
                "complete weights-only checkpoint; it is corrupt or holds "
                "Python objects); refusing to resume. Move it out of "
                f"{os.path.dirname(path)} to resume from an older one, or "
                "use another --root_dir") from e
