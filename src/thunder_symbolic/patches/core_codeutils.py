"""Patches of ``thunder/core/codeutils.py``: printing a trace is not an observation of the program."""

from __future__ import annotations

from thunder_symbolic._registry import patch
from thunder_symbolic.guards import recorder as guard_recorder

for _name in ("prettyprint", "is_printable"):
    patch(
        f"thunder.core.codeutils:{_name}",
        summary=f"{_name} runs with guard recording paused",
        why=(
            "Generating a trace's Python source hashes and converts the numbers it prints; while a backward "
            "is built under symbolic values that looked like the backward depending on their values, and "
            "pinned the program to the first input's sizes."
        ),
        upstream="Lightning-AI/lightning-thunder#463",
    )(guard_recorder.unobserved)
del _name
