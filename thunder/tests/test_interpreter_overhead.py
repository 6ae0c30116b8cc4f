"""The interpreter's shortcuts (see ``patches/core_interpreter.py``) keep what it computes: the same values and
provenance for globals, the same errors and tracebacks, with fewer interpreted frames."""

import traceback

import pytest
import torch

import thunder

SCALE = 3.0
ACTIVATION = torch.relu


def x():
    return torch.randn(3, 4)


def test_globals_and_builtins_are_read_without_interpreting_a_frame():
    """A global or builtin read is one lookup: 0.2.6 interpreted `lambda d, k: d[k]` (and the subscript it calls)
    for each, twice for a builtin, and tracing a model reads thousands of them."""

    def f(t):
        return ACTIVATION(t) * SCALE + abs(-2)

    jf = thunder.jit(f, debug_options=thunder.DebugOptions(record_interpreter_history=True))
    torch.testing.assert_close(jf(t := x()), f(t))
    names = [inst.opname for inst in thunder.last_interpreted_instructions(jf)]
    after_a_global = [names[i + 1] for i, name in enumerate(names[:-1]) if name == "LOAD_GLOBAL"]
    assert len(after_a_global) >= 3 and "RESUME" not in after_a_global  # RESUME: a frame starts


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_a_global_rebound_between_calls_is_read_again(cache):
    global SCALE

    def f(t):
        return t * SCALE

    jf = thunder.jit(f, cache=cache)
    try:
        for scale in (3.0, 5.0, 3.0):
            SCALE = scale
            torch.testing.assert_close(jf(t := x()), f(t))
    finally:
        SCALE = 3.0


def test_a_missing_global_is_still_a_name_error():
    def f(t):
        return t + NOT_DEFINED_ANYWHERE  # noqa: F821

    with pytest.raises(NameError, match="NOT_DEFINED_ANYWHERE"):
        thunder.jit(f)(x())


def raises_after_a_loop(t, which):
    for _ in range(2):  # the loop ends with a StopIteration raised in interpreted code
        t = t + 1
    if which == "key":
        raise KeyError("from the first raise")
    raise LookupError("from the second raise")


def test_tracebacks_of_interpreted_code_point_at_the_raising_line():
    """Stand-in frames are shared per position; each traceback still ends at its own line."""
    lines = {}
    for which, error in (("key", KeyError), ("lookup", LookupError), ("key", KeyError)):
        with pytest.raises(error) as info:
            thunder.jit(raises_after_a_loop)(x(), which)
        user = [fr for fr in traceback.extract_tb(info.value.__traceback__) if fr.name == "raises_after_a_loop"]
        assert user, "the traceback lost the user's frame"
        lines.setdefault(which, set()).add(user[-1].line)
    assert lines == {
        "key": {'raise KeyError("from the first raise")'},
        "lookup": {'raise LookupError("from the second raise")'},
    }
