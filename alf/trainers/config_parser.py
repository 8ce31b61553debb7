"""Parsing a run's gin configuration with every configurable registered.

This sits above the algorithms, environments and trainers because it must
import them: gin only knows a configurable once its module is imported, and
a misspelt configurable or parameter should fail at parse time, not deep
into a run after files are written.
"""
import os
import tempfile
from typing import Iterable, List, Optional

import alf.algorithms  # noqa: F401  (registers configurables)
import alf.environments.straggler  # noqa: F401
import alf.environments.suite_gym  # noqa: F401
import alf.trainers.trainer  # noqa: F401
from alf.config import parse_gin, qualify_saved_selectors
from alf.utils.errors import ConfigError


def parse_config(gin_files: Iterable[str],
                 gin_params: Optional[Iterable[str]] = None) -> List[str]:
    """Clears gin and parses ``gin_files`` then ``gin_params``.

    Every alf module with configurables is imported first, so that a typo in a
    configurable's or parameter's name is reported at parse time.

    Returns and raises as `alf.config.parse_gin`: the resolved paths of
    the gin files; a one-line ``ConfigError`` for any mistake in them.
    """
    return parse_gin(gin_files, gin_params)


def parse_run_config(path: str,
                     gin_params: Optional[Iterable[str]] = None) -> None:
    """Clears gin and parses a run's saved config (``config.gin``) then
    ``gin_params``. A gymnasium run's file names its loader ``load`` (gin
    writes the shortest selector unambiguous where it was written), which
    is ambiguous in a process that also registered suite_metadrive's (a
    script that imports it); it is read as ``suite_gym.load``
    (`alf.config.qualify_saved_selectors`).

    Raises:
        ConfigError: one line, as `parse_config`.
    """
    try:
        with open(path) as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not a gin file: it is not UTF-8 text "
                          f"(byte {e.start})") from None
    qualified = qualify_saved_selectors(text)
    if qualified == text:
        parse_config([path], gin_params)
        return
    # Parsed as a file, not as a binding: a mistake in it then names the
    # file and its line, and a --gin_param's line is its own.
    try:
        copy = os.path.join(_copies(), os.path.basename(path))
        with open(copy, "w") as f:
            f.write(qualified)
    except OSError:  # no room for a copy: as a binding, then
        parse_config([], [qualified, *(gin_params or [])])
        return
    try:
        parse_config([copy], gin_params)
    except ConfigError as e:
        raise ConfigError(str(e).replace(copy, path)) from None


# One folder per process for the copies (gin keeps each file's folder on
# its search path: calibrate parses a config per candidate); removed at
# exit.
_folder: Optional[tempfile.TemporaryDirectory] = None


def _copies() -> str:
    global _folder
    if _folder is None:
        _folder = tempfile.TemporaryDirectory(prefix="alf-configs-")
    return _folder.name
