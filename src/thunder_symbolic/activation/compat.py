"""Which thunder and torch versions the patch set supports, and the message when they do not match.

The patches replace and wrap private functions of one thunder release; on any other release they
could silently do the wrong thing, so the patch set refuses to apply instead.
"""

from __future__ import annotations

import re

SUPPORTED_THUNDER = "0.2.6"
SUPPORTED_TORCH = ((2, 9), (2, 14))  # first and last major.minor series, each tested (requirements/torch-*.txt)
SUPPORTED_RANGE = "lightning-thunder==0.2.6 with torch>=2.9,<2.15 (tested: 2.9.1, 2.10.0, 2.12.1, 2.14.1)"


def _series(version: str) -> tuple[int, int] | None:
    """``"2.14.1+cu130"`` -> ``(2, 14)``; None for a string that names no release."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def unsupported_reason(thunder_version: str, torch_version: str) -> str | None:
    """None when the versions are supported, else a message naming what was found and what is supported."""
    problems = []
    if thunder_version != SUPPORTED_THUNDER:
        problems.append(f"lightning-thunder {thunder_version}")
    torch_series = _series(torch_version)
    if torch_series is None or not SUPPORTED_TORCH[0] <= torch_series <= SUPPORTED_TORCH[1]:
        problems.append(f"torch {torch_version}")
    if not problems:
        return None
    return (
        f"thunder-symbolic supports {SUPPORTED_RANGE}, but found {' and '.join(problems)}: "
        "the patch set was not applied and thunder runs unpatched."
    )
