"""User-facing errors: the CLI prints these as one line and exits non-zero."""
import signal
import sys
from typing import Callable, TypeVar

from alf.utils.process import exit_code_for

T = TypeVar("T")


class AlfError(Exception):
    """An error caused by the user's input (config, paths, flags).

    The message must name the bad value and what would be valid; the CLI
    prints it without a traceback.

    Attributes:
        retryable: whether restarting from the last checkpoint may help
            (``--max_restarts``): False for the user's input, True for a
            subclass that reports a process that died or failed.
        on_every_rank: whether every rank raises this same error (the
            ranks agreed on it), so that rank 0 alone need say it.
    """
    retryable = False
    on_every_rank = False


class ConfigError(AlfError):
    """A gin file or binding that cannot be used."""


class CheckpointError(AlfError):
    """A checkpoint that cannot be read or does not fit the config."""


class TrainingError(AlfError):
    """Training cannot continue (e.g. a non-finite loss)."""


class CollectionError(AlfError):
    """An actor process of asynchronous collection failed or died (an
    environment's crash, the kernel's out-of-memory kill), or an
    environment worker of lock-step collection died or stopped: a restart
    from the last checkpoint may get past it."""
    retryable = True


class CollectionStopped(AlfError):
    """A stop was asked for while the learner waited for an unroll (or a
    lock-step environment step) that did not come in time (an actor or an
    environment worker stopped or hung): the trainer then saves the last
    complete iteration instead of waiting on."""


class EvaluationError(AlfError):
    """The evaluator process failed or died, or a worker of the trainer's
    own evaluation environments died (or, in a multi-rank run, stopped): a
    restart from the last checkpoint may get past it."""
    retryable = True


class TrainingInterrupted(AlfError):
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP): a checkpoint was saved and
    the run can be resumed. (Here, not beside the trainer: the launcher's
    ranks catch it without importing torch first.)

    Attributes:
        exit_code: the shell's convention for the signal (128 + signum).
        said: whether it was logged already (as the checkpoint was saved,
            before the run closed its helpers): a catcher that says the
            error does not say it twice.
    """

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.exit_code = exit_code_for(signum)
        self.said = False


def one_line(error: BaseException) -> str:
    """An error's message on one line: its first line, plus where gin says a
    binding is.

    gin appends context on later lines. "In file x.gin, line 3" (or "In
    bindings string line 1") and the binding's text tell the user what to
    fix, so they are kept; "In call to configurable ..." repeats what the
    first line says and is dropped, as is anything else after the first line.
    """
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    if not lines:
        return type(error).__name__
    if len(lines) > 1 and lines[1].startswith(("In file",
                                               "In bindings string")):
        return " ".join(lines[:3])
    return lines[0]


def run_cli(prog: str, fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` for a command-line tool: an `AlfError` is
    its one line on stderr (``prog: error: message``, as every alf.bin
    command says it) and exit code 1, Ctrl-C is ``prog: interrupted`` and
    exit code 130. So is an `OSError` (a full disk, a file that cannot be
    read), whose message names the file."""
    try:
        return fn(*args, **kwargs)
    except (AlfError, OSError) as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
