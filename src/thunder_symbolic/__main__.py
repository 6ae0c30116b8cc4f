"""``python -m thunder_symbolic``: print the versions, whether the patch set is active, and every patch.

Exits with status 1 when the patch set should be active and is not (an unsupported version, a patch that could
not apply); ``THUNDER_SYMBOLIC=0`` is no failure."""

import sys

import thunder_symbolic

report = thunder_symbolic.status()
print(report)
sys.exit(0 if report.active or not thunder_symbolic.enabled_by_environment() else 1)
