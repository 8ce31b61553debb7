"""What every ``alf.bin`` command does around its ``main``: absl's
``app.run``, with a ``--help`` that helps."""
import re
import signal
import sys
from typing import Callable, List, NoReturn

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
    prints ``module_name``'s docstring and flags to stdout and exits 0, and
    a bad flag or argument is one line on stderr (exit 1).

    absl exits 1 on ``--help``, and under a console script (``alf-train``)
    it printed neither: it looks for them in the script's wrapper. A bad
    flag took two lines, an unexpected argument the whole help.
    """
    from alf.utils.process import quiet_resource_tracker
    quiet_resource_tracker()
    spec = getattr(sys.modules[module_name], "__spec__", None)
    prog = spec.name if spec is not None else module_name  # -m: __main__

    def usage_error(error: Exception) -> NoReturn:
        text = str(error)
        required = re.search(r"Flag (--\w+) must have a value other than "
                             r"None", text)
        if required:  # absl: "flag --x=None: Flag --x must have ..."
            text = f"{required.group(1)} is required"
        sys.stderr.write(f"{prog}: error: {text} (--help lists the "
                         "flags)\n")
        sys.exit(1)

    def parse(argv: List[str]) -> List[str]:
        for arg in argv[1:]:
            if arg == "--":
                break
            if arg in _SHORT_HELP or arg in _FULL_HELP:
                sys.stdout.write(help_text(module_name, arg in _FULL_HELP))
                sys.exit(0)
        try:
            return flags.FLAGS(argv)
        except flags.Error as e:
            usage_error(e)

    def guarded(argv: List[str]) -> None:
        try:
            main(argv)
        except app.UsageError as e:
            usage_error(e)

    app.run(guarded, flags_parser=parse)


# The stop signal `interrupt_on_stop_signals`' handler received (0: none).
_stopped_by = 0


def _listen_to_sigint() -> None:
    """A tool started in the background (``&`` in a script) inherits
    SIGINT ignored, the shell's rule for background jobs: ``kill -INT``
    must stop it all the same, as it stops ``alf.bin.train``."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupt_on_stop_signals() -> None:
    """Makes SIGTERM and SIGHUP interrupt this tool as Ctrl-C does (its
    ``except KeyboardInterrupt`` stops what it started and says so);
    `exit_code_for_interrupt` then gives the shell's code for the signal.
    Without it a scheduler's SIGTERM ended the tool silently."""

    def stop(signum, frame):
        global _stopped_by
        _stopped_by = _stopped_by or signum
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    _listen_to_sigint()


def exit_on_stop_signals(prog: str) -> None:
    """Makes SIGTERM and SIGHUP end this tool with the shell's exit code
    (128 + the signal) after one line, ``prog: SIGTERM: stopped``,
    unwinding as Ctrl-C does (so that `finally` blocks remove what was
    half written). For tools that start no processes of their own;
    without it a scheduler's SIGTERM ended the tool silently."""
    from alf.utils import process

    def stop(signum, frame):
        print(f"{prog}: {process.signal_name(signum)}: stopped",
              file=sys.stderr)
        raise SystemExit(process.exit_code_for(signum))

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    _listen_to_sigint()


def exit_code_for_interrupt() -> int:
    """128 + the signal that interrupted the tool (SIGINT's 130 for
    Ctrl-C)."""
    return 128 + int(_stopped_by or signal.SIGINT)


if __name__ == "__main__":
    sys.exit("alf.bin.cli is what alf's commands share, not a command: run "
             "alf.bin.train, play, compare, report or calibrate (--help "
             "lists their flags)")
