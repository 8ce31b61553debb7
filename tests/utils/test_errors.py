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
