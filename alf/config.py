"""Configuration through gin: `configurable`, gin-file lookup and parsing."""
import io
import os
import tokenize
from typing import Iterable, List, Optional

import gin

from alf.utils.errors import ConfigError

__all__ = ["configurable", "find_gin_file", "parse_config", "examples_dir"]

configurable = gin.configurable


def examples_dir() -> str:
    """The packaged folder of example gin files (``alf/examples``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")


def find_gin_file(name: str) -> str:
    """Resolves a ``--gin_file`` value to an existing path.

    A path that exists is used as is; otherwise the bare name is looked up in
    the current directory and then in the packaged ``alf/examples/``.

    Raises:
        ConfigError: naming every place that was searched.
    """
    candidates = [name]
    if not os.path.isabs(name):
        candidates += [os.path.join(os.getcwd(), name),
                       os.path.join(examples_dir(), name)]
    for path in candidates:
        if os.path.isfile(path):
            return os.path.abspath(path)
    where = ", ".join(dict.fromkeys(os.path.abspath(c) for c in candidates))
    raise ConfigError(f"gin file {name!r} not found; looked in: {where}")


def _one_line(err: Exception) -> str:
    # gin appends "In file ..., line ..." context on later lines; keep the
    # first line (the actual complaint) and the location if present.
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return " ".join(lines[:3]) if lines else type(err).__name__


def parse_config(gin_files: Iterable[str],
                 gin_params: Optional[Iterable[str]] = None) -> List[str]:
    """Clears gin and parses ``gin_files`` then ``gin_params``.

    Every alf module with configurables is imported first, so that a typo in a
    configurable's or parameter's name is reported at parse time.

    Returns:
        The resolved paths of the gin files.

    Raises:
        ConfigError: for a missing file or an unknown/invalid binding.
    """
    import alf.algorithms  # noqa: F401  (registers configurables)
    import alf.environments.suite_gym  # noqa: F401
    import alf.trainers  # noqa: F401

    paths = [find_gin_file(f) for f in gin_files]
    gin.clear_config()
    gin.add_config_file_search_path(examples_dir())
    for p in paths:
        gin.add_config_file_search_path(os.path.dirname(p))
    try:
        gin.parse_config_files_and_bindings(
            paths, list(gin_params or []), finalize_config=False)
    except (ValueError, KeyError, SyntaxError, NameError, TypeError) as e:
        raise ConfigError(f"bad gin configuration: {_one_line(e)}") from e
    except tokenize.TokenError as e:
        # gin's tokenizer gives no location: find the binding it choked on.
        bad = [f"--gin_param {b!r}" for b in gin_params or []
               if not _tokenizes(b)]
        bad += [p for p in paths if not _tokenizes(open(p).read())]
        where = bad[0] if bad else f"one of {', '.join(paths)}"
        raise ConfigError(f"bad gin configuration: {e.args[0]} in {where}; "
                          "a bracket or quote is not closed") from e
    return paths


def _tokenizes(text: str) -> bool:
    try:
        list(tokenize.generate_tokens(io.StringIO(text).readline))
        return True
    except tokenize.TokenError:
        return False
