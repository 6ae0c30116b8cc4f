"""The package's boolean environment switches, read one way everywhere (imports nothing heavy: the start-up hook
reads ``THUNDER_SYMBOLIC`` in every process)."""

from __future__ import annotations

import os

_OFF = frozenset({"0", "false", "no", "off"})
_ON = frozenset({"1", "true", "yes", "on"})


def switch(name: str, default: bool = True) -> bool:
    """Whether the switch ``name`` is on: ``0/false/no/off`` turn it off, ``1/true/yes/on`` on (any case); unset or
    empty, ``default``; any other value is a ``ValueError`` naming the variable."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(f"{name} must be one of 0/false/no/off or 1/true/yes/on, got {os.environ[name]!r}")
