"""`one_line`: the single form in which the CLIs print a user's error."""
import gin
import pytest

from alf.utils.errors import one_line


def _gin_error(text):
    with pytest.raises(Exception) as info:
        gin.parse_config(text)
    return info.value


def test_a_binding_error_keeps_where_the_binding_is():
    line = one_line(_gin_error("NoSuchThing.x = 3"))
    assert line == ("No configurable matching 'NoSuchThing'. In bindings "
                    "string line 1 NoSuchThing.x = 3")


def test_gin_call_context_and_other_lines_are_dropped():
    err = ValueError("lr=-1 must be positive\n  In call to configurable "
                     "'PPOAlgorithm' (<class 'PPOAlgorithm'>)")
    assert one_line(err) == "lr=-1 must be positive"
    assert one_line(RuntimeError("first\nsecond\nthird")) == "first"


def test_an_empty_message_names_the_error_type():
    assert one_line(KeyError()) == "KeyError"
    assert one_line(OSError("  \n ")) == "OSError"


def test_run_cli_returns_or_exits_with_one_line(capsys):
    from alf.utils.errors import ConfigError, run_cli
    assert run_cli("tool", lambda x, y=0: x + y, 1, y=2) == 3

    def bad():
        raise ConfigError("--x=3; valid: 1 or 2\nIn call to configurable X")

    def interrupted():
        raise KeyboardInterrupt

    def full():  # a GIF's write on a full disk
        raise OSError(28, "No space left on device", "out.gif")

    for fn, code, line in ((bad, 1, "tool: error: --x=3; valid: 1 or 2"),
                           (interrupted, 130, "tool: interrupted"),
                           (full, 1, "tool: error: [Errno 28] No space left "
                            "on device: 'out.gif'")):
        with pytest.raises(SystemExit) as exit_info:
            run_cli("tool", fn)
        assert exit_info.value.code == code
        assert capsys.readouterr().err == line + "\n"
    # Not a user's error: a traceback, as for any bug.
    with pytest.raises(ZeroDivisionError):
        run_cli("tool", lambda: 1 / 0)
