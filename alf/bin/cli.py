"""What every ``alf.bin`` command does around its ``main``: absl's
``app.run``, with a ``--help`` that helps."""
import sys
from typing import Callable, List

from absl import app, flags

_SHORT_HELP = {"-h", "-help", "--help", "-?", "-helpshort", "--helpshort"}
_FULL_HELP = {"-helpfull", "--helpfull"}


def help_text(module_name: str, full: bool = False) -> str:
    """The command's docstring, then its flags (all of them with ``full``:
    absl's and torch's too)."""
    module = sys.modules[module_name]
    flag_help = (flags.FLAGS.get_help() if full else
                 flags.FLAGS.module_help(module))
    return f"{(module.__doc__ or '').rstrip()}\n\nflags:\n{flag_help}\n"


def run(main: Callable[[List[str]], None], module_name: str) -> None:
    """``app.run(main)``, except that ``--help`` (``-h``, ``--helpfull``)
    prints ``module_name``'s docstring and flags to stdout and exits 0.

    absl exits 1 on ``--help``, and under a console script (``alf-train``)
    it printed neither: it looks for them in the script's wrapper.
    """

    def parse(argv: List[str]) -> List[str]:
        for arg in argv[1:]:
            if arg == "--":
                break
            if arg in _SHORT_HELP or arg in _FULL_HELP:
                sys.stdout.write(help_text(module_name, arg in _FULL_HELP))
                sys.exit(0)
        return app.parse_flags_with_usage(argv)

    app.run(main, flags_parser=parse)
