"""User-facing errors: the CLI prints these as one line and exits non-zero."""


class AlfError(Exception):
    """An error caused by the user's input (config, paths, flags).

    The message must name the bad value and what would be valid; the CLI
    prints it without a traceback.
    """


class ConfigError(AlfError):
    """A gin file or binding that cannot be used."""


class CheckpointError(AlfError):
    """A checkpoint that cannot be read or does not fit the config."""


class TrainingError(AlfError):
    """Training cannot continue (e.g. a non-finite loss)."""


def one_line(error: BaseException) -> str:
    """The first line of an error's message.

    gin appends "In call to configurable ..." on a second line to errors
    raised inside configurables; users need only the first.
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
