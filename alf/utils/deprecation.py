"""Former spellings of parameters: still accepted, with one warning.

A renamed gin-visible parameter keeps its former name as a keyword
parameter whose default is `FORMER`: gin refuses unknown parameters at
parse time, so gin files and runs' saved ``config.gin`` files that spell it
the old way would fail to parse without it. `former_spelling` then takes
the value given under the old name, warns once, and refuses a value given
under both names.
"""
from typing import Sequence, Set

from absl import logging

from alf.utils import distributed
from alf.utils.errors import ConfigError


class _Former:
    """The default of a parameter kept under its former spelling: not
    given. Not a literal, so gin leaves it out of the operative config
    (saved ``config.gin`` files spell only the new names)."""

    def __repr__(self):
        return "<former spelling: not given>"


#: The default of every parameter kept under its former spelling.
FORMER = _Former()

_warned: Set[str] = set()  # messages already logged in this process


def former_spelling(owner: str, former: str, value,
                    new_names: Sequence[str], new_given: bool) -> bool:
    """Whether ``owner``'s parameter ``former`` (a former spelling) was
    given; if so, logs once per process (rank 0 only) a one-line warning
    naming ``new_names``.

    Args:
        owner: the configurable, as gin names it (``TrainerConfig``).
        former: the former parameter name.
        value: the value passed under ``former`` (`FORMER` if none).
        new_names: the parameter(s) that replace it, each optionally
            followed by when it applies: ``"num_epochs (on-policy)"``.
        new_given: whether one of ``new_names`` was given too (differs
            from its default: a saved operative config lists every
            default).

    Raises:
        ConfigError: one line, if both spellings were given.
    """
    if value is FORMER:
        return False
    new = " or ".join(f"{owner}.{name}" for name in new_names)
    if new_given:
        raise ConfigError(f"{owner}.{former} and its new spelling {new} "
                          "are both set; keep only the new one")
    warn_deprecated(f"{owner}.{former} is deprecated; use {new}")
    return True


def warn_deprecated(message: str) -> None:
    """Logs ``message`` (one line naming the new spelling) once per process,
    on rank 0 only: a setting is read on every rank and often many times."""
    if message not in _warned and distributed.get_rank() == 0:
        _warned.add(message)
        logging.warning("%s", message)
