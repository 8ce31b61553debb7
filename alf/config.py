"""Configuration through gin: `configurable`, gin-file lookup and parsing."""
import difflib
import inspect
import io
import logging
import os
import re
import tokenize
import traceback
from typing import Iterable, List, Optional, Set

import gin

from alf.utils.errors import ConfigError, one_line

__all__ = ["configurable", "find_gin_file", "parse_gin", "examples_dir",
           "qualify_saved_selectors"]

configurable = gin.configurable


def examples_dir() -> str:
    """The packaged folder of example gin files (``alf/examples``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")


# A saved config names each configurable by its shortest unambiguous
# selector in the process that wrote it: a gymnasium run writes its loader
# as bare ``load``, ambiguous where suite_metadrive's ``load`` is known too.
_BARE_LOAD_BINDING = re.compile(r"^((?:[\w.]+/)*)load\.(?=\w+\s*=)", re.M)
_BARE_LOAD_REFERENCE = re.compile(r"@((?:[\w.]+/)*)load\b(?![.\w])")


def qualify_saved_selectors(text: str) -> str:
    """``text`` (a run's saved ``config.gin``) with its bare ``load``
    selectors spelt ``suite_gym.load``: the only ``load`` registered when
    it was written (alf always registers `alf.environments.suite_gym`; a
    second ``load`` would have made gin write the full name)."""
    text = _BARE_LOAD_BINDING.sub(r"\1suite_gym.load.", text)
    return _BARE_LOAD_REFERENCE.sub(r"@\1suite_gym.load", text)


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
    if os.path.isdir(name):
        raise ConfigError(f"gin file {name!r} is a folder; give a .gin file "
                          f"(e.g. one of {', '.join(_gin_names(name))})")
    where = ", ".join(dict.fromkeys(os.path.abspath(c) for c in candidates))
    raise ConfigError(f"gin file {name!r} not found; looked in: {where}")


def parse_gin(gin_files: Iterable[str],
              gin_params: Optional[Iterable[str]] = None) -> List[str]:
    """Clears gin and parses ``gin_files`` then ``gin_params``.

    Only the configurables already imported are known, so a binding of one
    not imported yet is an error here. `alf.trainers.parse_config` imports
    every alf module with configurables first and is what a program calls;
    this layer (below algorithms and trainers) cannot import them itself.

    Returns:
        The resolved paths of the gin files.

    Raises:
        ConfigError: one line, for a missing file or include, an unknown or
            invalid binding (named, with its file and line), a syntax error,
            a gin ``import`` of a missing module or an undefined macro.
    """
    paths = [find_gin_file(f) for f in gin_files]
    gin.clear_config()
    search = [examples_dir()] + [os.path.dirname(p) for p in paths]
    for folder in search:
        if folder not in _search_paths:  # gin keeps them across clears
            _search_paths.add(folder)
            gin.add_config_file_search_path(folder)
    try:
        gin.parse_config_files_and_bindings(
            paths, list(gin_params or []), finalize_config=False)
    except Exception as e:
        error = None
        if not _raised_by_imported_code(e):
            error = _config_error(e, search, list(gin_params or []), paths)
        if error is None:
            # Not the configuration's fault (a bug in a module the config
            # imports): its traceback says where, which one line would lose.
            raise
        raise error from e
    _check_macros()
    _check_values()
    _check_switches()
    return paths


def _config_error(err: Exception, search: List[str], gin_params: List[str],
                  paths: List[str]) -> Optional[ConfigError]:
    """gin's error ``err`` as one line, or None if it is not one of the
    configuration's."""
    if isinstance(err, ImportError):  # `import no_such_module`
        return ConfigError(f"bad gin configuration: {one_line(err)}; a gin "
                           "`import` must name an installed Python module")
    if isinstance(err, OSError):  # an `include` gin cannot find
        return ConfigError(_include_error(err, search))
    if isinstance(err, SyntaxError):
        return ConfigError(_syntax_error(err, gin_params, paths))
    if isinstance(err, UnicodeDecodeError):
        # gin reads a file without naming it: find the one.
        for path in paths:
            why = _undecodable(path)
            if why is not None:
                return ConfigError(f"bad gin configuration: {path} is not "
                                   f"UTF-8 text ({why.reason} at byte "
                                   f"{why.start}); a gin file is UTF-8 text")
        return ConfigError("bad gin configuration: a file included by "
                           f"{', '.join(paths)} is not UTF-8 text "
                           f"({err.reason}); a gin file is UTF-8 text")
    if isinstance(err, (ValueError, KeyError, NameError, TypeError)):
        return ConfigError(f"bad gin configuration: {one_line(err)}"
                           f"{_parameter_hint(err)}")
    if isinstance(err, tokenize.TokenError):
        # gin's tokenizer gives no location: find the binding it choked on.
        bad = [f"--gin_param {b!r}" for b in gin_params
               if not _tokenizes(b)]
        bad += [p for p in paths if not _tokenizes(open(p).read())]
        where = bad[0] if bad else f"one of {', '.join(paths)}"
        return ConfigError(f"bad gin configuration: {err.args[0]} in "
                           f"{where}; a bracket or quote is not closed")
    return None


def _undecodable(path: str) -> Optional[UnicodeDecodeError]:
    """Why ``path`` is not UTF-8 text (its ``start``: the byte in the
    file, where gin's reading gives one in its chunk), or None."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e
    return None


# Code that is not a user's: gin's, alf's and the standard library's.
_NOT_IMPORTED = ("<", os.path.dirname(os.path.abspath(gin.__file__)) + os.sep,
                 os.path.dirname(os.path.abspath(__file__)) + os.sep)
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def _raised_by_imported_code(err: BaseException) -> bool:
    """Whether ``err`` came out of a module that a gin ``import`` executed
    (parsing runs no other code than gin's): a frame of other code than
    gin's, alf's or the standard library's (an import of a missing module,
    or a syntax error, has none)."""
    return any(not f.filename.startswith(_NOT_IMPORTED) and not (
        f.filename.startswith(_STDLIB) and "-packages" + os.sep not in
        f.filename) for f in traceback.extract_tb(err.__traceback__))


def _check_values() -> None:
    """Checks bindings whose values are only read deep into training (after
    files are written) at parse time instead."""
    from alf.utils.distributed import FIND_UNUSED_PARAMETERS
    choices = [("make_ddp_performer.find_unused_parameters",
                FIND_UNUSED_PARAMETERS)]
    for binding, valid in choices:
        try:
            value = gin.query_parameter(binding)
        except ValueError:  # not bound: the default applies
            continue
        if not any(value is v or value == v and type(value) is type(v)
                   for v in valid):
            raise ConfigError(
                f"bad gin configuration: {binding} = {value!r}; expected one "
                f"of {', '.join(repr(v) for v in valid)}")
    for binding in _CALLED_LATER:
        try:
            value = gin.query_parameter(binding)
        except ValueError:
            continue
        written = str(value)
        while str(value).startswith("%"):  # a macro (gin evaluates it)
            value = gin.query_parameter(str(value))
        if getattr(value, "evaluate", False):  # `@X()`: gin calls X itself
            name = str(value)[:-2]
            if written != str(value):
                written += f" ({value})"
            raise ConfigError(
                f"bad gin configuration: {binding} = {written}; bind {name} "
                f"itself, without (): the trainer calls it with what it "
                "needs (the spaces, the environments' count and seed)")


# Bindings that the trainer calls: `@X()` would make gin call X, with none of
# its arguments, when the config is built.
_CALLED_LATER = ("TrainerConfig.algorithm_ctor", "TrainerConfig.env_load_fn",
                 "TrainerConfig.held_out_env_load_fn",
                 "TrainerConfig.calibration_env_load_fn")


_search_paths: Set[str] = set()  # folders given to gin.add_config_file_search_path


def _syntax_error(err: SyntaxError, gin_params: List[str],
                  paths: List[str]) -> str:
    """gin's syntax error, naming the binding or file and line it is in."""
    msg = " ".join(str(err.msg).split()).rstrip(".")
    if err.filename is None and err.lineno:
        # gin parses the bindings joined by newlines: find the one that
        # holds the line.
        lines = [b for b in gin_params for _ in b.split("\n")]
        if err.lineno <= len(lines):
            return (f"bad gin configuration: {msg} in --gin_param "
                    f"{lines[err.lineno - 1]!r}")
    if err.filename and err.lineno:
        matches = [p for p in paths if p.endswith(os.sep + err.filename)]
        where = matches[0] if len(matches) == 1 else err.filename
        stripped = (err.text or "").strip()
        text = f": {stripped}" if stripped else ""
        return (f"bad gin configuration: {msg} in {where}, line "
                f"{err.lineno}{text}")
    return f"bad gin configuration: {one_line(err)}"


def _include_error(err: OSError, search: List[str]) -> str:
    text = str(err)
    m = re.match(r"Unable to open file: (.*?)\. Searched", text)
    if not m:
        return f"bad gin configuration: {one_line(err)}"
    where = [ln.strip() for ln in text.splitlines()[1:2]]
    looked = ", ".join(dict.fromkeys([os.getcwd()] + search))
    return (f"bad gin configuration: include {m.group(1)!r} not found"
            f"{' (' + where[0] + ')' if where else ''}; looked in: {looked}")


def _configurable_hint(err: Exception) -> str:
    """For gin's "No configurable matching" error: the close matches among
    the configurables known, else how a user's own becomes known."""
    m = re.search(r"No configurable matching (?:reference )?'@?([^']+)'",
                  str(err))
    if not m:
        return ""
    wanted = m.group(1).split("/")[-1]  # a scope is not part of the name
    names = {sel for sel, _ in gin.config._REGISTRY.items()
             if not sel.startswith("gin.")}
    names |= {sel.split(".")[-1] for sel in names}
    close = difflib.get_close_matches(wanted, sorted(names), n=3)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    return ("; a class or function of your own must be decorated with "
            "@alf.configurable, and the gin file must import its module "
            "(a line `import mypackage.mymodule`)")


def _parameter_hint(err: Exception) -> str:
    """For gin's "doesn't have a parameter named" error: the close matches
    among the configurable's parameters, or all of them; for an unknown
    configurable, `_configurable_hint`."""
    m = re.search(r"Configurable '([^']+)' doesn't have a parameter named "
                  r"'([^']+)'", str(err))
    if not m:
        return _configurable_hint(err)
    try:
        names = [p for p in inspect.signature(
            gin.get_configurable(m.group(1))).parameters
            if p not in ("self", "observation_space", "action_space",
                         "config")]
    except (ValueError, TypeError):  # no signature to read
        return ""
    close = difflib.get_close_matches(m.group(2), names, n=3)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    return f"; its parameters: {', '.join(names)}"


def _check_macros() -> None:
    """Refuses a ``%NAME`` that no ``NAME = ...`` defines.

    gin checks macros only when the config is finalized (alf keeps it open
    for later bindings), so without this an undefined one fails deep inside
    training as ``macro() missing 1 required positional argument``.
    """
    config = gin.config._CONFIG  # read only; gin has no public view of it
    macro = gin.get_configurable(gin.config.macro)
    for (scope, selector), bindings in config.items():
        for name, value in bindings.items():
            for ref in gin.config.iterate_references({0: value}, to=macro):
                if ref.config_key not in config:
                    owner = selector.split(".")[-1]
                    target = f"{scope}/{owner}" if scope else owner
                    macro_name = "/".join(ref.scopes)  # %NAME is NAME/macro
                    raise ConfigError(
                        f"bad gin configuration: {target}.{name} uses macro "
                        f"%{macro_name}, which is not defined; define it "
                        f"with a line such as `{macro_name} = ...`")


def _check_switches() -> None:
    """Refuses a binding of a switch (a parameter whose default is True or
    False) to anything but True or False: ``"no"`` (a string) would read
    as true and turn on what the user meant to turn off, without a word;
    0 and 1 are typos too."""
    for (scope, selector), bindings in gin.config._CONFIG.items():
        try:
            params = inspect.signature(
                gin.get_configurable(selector)).parameters
        except (ValueError, TypeError):  # a macro, or no signature to read
            continue
        for name, value in bindings.items():
            param = params.get(name)
            if (param is None or not isinstance(param.default, bool)
                    or isinstance(value, bool)
                    or isinstance(value, gin.config.ConfigurableReference)):
                continue
            owner = selector.split(".")[-1]
            raise ConfigError(f"{scope + '/' if scope else ''}{owner}.{name}"
                              f"={value!r}; valid: True or False")


class _GinProbeFilter(logging.Filter):
    """Drops gin's log lines about probing its search path.

    For every ``include``, gin tries each search folder with each of its file
    readers; its reader of files inside Python packages logs the attempt
    (INFO) and, when the candidate is not a package path, "Path not found"
    at ERROR level, even though the file is then found in the next folder.
    A missing include is still reported (`parse_gin` raises).
    """

    _PROBES = ("system_path_file_exists:%s", "Path not found: %s")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.module == "resource_reader"
                    and record.msg in self._PROBES)


logging.getLogger().addFilter(_GinProbeFilter())


def _tokenizes(text: str) -> bool:
    try:
        list(tokenize.generate_tokens(io.StringIO(text).readline))
        return True
    except tokenize.TokenError:
        return False


def _gin_names(folder: str) -> list:
    """Up to three ``.gin`` files of ``folder``, for an example."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(".gin"))
    return [os.path.join(folder, n) for n in names[:3]] or ["ppo_cart_pole.gin"]
