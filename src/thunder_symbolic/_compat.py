"""Which thunder and torch versions the patch set supports, and the message when they do not match.

The patches replace and wrap private functions of one thunder release; on any other release they
could silently do the wrong thing, so the patch set refuses to apply instead.
"""

from __future__ import annotations

import re

SUPPORTED_THUNDER = "0.2.6"
SUPPORTED_TORCH = ((2, 9),)  # major.minor series tested (2.9.1); thunder 0.2.6 does not import on torch >= 2.13
SUPPORTED_RANGE = "lightning-thunder==0.2.6 with torch>=2.9,<2.10 (tested: torch 2.9.1)"


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def unsupported_reason(thunder_version: str, torch_version: str) -> str | None:
    """None when the versions are supported, else a message naming what was found and what is supported."""
    problems = []
    if thunder_version != SUPPORTED_THUNDER:
        problems.append(f"lightning-thunder {thunder_version}")
    if _major_minor(torch_version) not in SUPPORTED_TORCH:
        problems.append(f"torch {torch_version}")
    if not problems:
        return None
    return (
        f"thunder-symbolic supports {SUPPORTED_RANGE}, but found {' and '.join(problems)}: "
        "the patch set was not applied and thunder runs unpatched."
    )
