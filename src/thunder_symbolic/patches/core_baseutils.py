"""Patches of ``thunder/core/baseutils.py``: the source of a generated program lives as long as the program."""

from __future__ import annotations

import functools
import linecache
import weakref

from thunder.core import baseutils

from thunder_symbolic.activation.registry import patch


@patch(
    "thunder.core.baseutils:build_callable",
    summary="the source it keeps in linecache for each generated program (prologue, computation, epilogue) is "
    "dropped when the program is freed",
    why=(
        "thunder keeps every program's source in linecache (for tracebacks) for the life of the process: about "
        "4 kB per compile, so jitting and deleting functions, or recompiling, grew memory without bound (1,000 "
        "functions jitted and freed kept 4 MB). The source is only read while the program can raise."
    ),
)
def _build_callable(original):
    @functools.wraps(original)
    def build_callable(fn_name, python_str, file_name, ctx):
        program_name = f"{file_name}_{baseutils._exec_ctr}"  # (the name thunder gives this program)
        built = original(fn_name, python_str, file_name, ctx)
        if program_name in linecache.cache:
            weakref.finalize(built, linecache.cache.pop, program_name, None)
        return built

    return build_callable
