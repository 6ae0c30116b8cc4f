"""A fixed background load on the cores, so that a comparison on a busy machine can be repeated.

A benchmark launched beside other work measures how each mode shares the cores: its waits (gloo's, or a
polling wait) and its threads compete with the other processes. Whether a machine is busy is a matter of
chance; :func:`busy_processes` makes it a parameter: ``n`` processes that each keep one core busy with a Python
loop, at the benchmark's own priority, for as long as the block runs. Each also ends by itself when the process
that started it is gone (a rank that crashed or ended without finalization leaves no spinning orphan).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["busy_processes"]

# Busy in Python; every 2**20 iterations (a few ms) it checks that its parent still lives.
_SPIN = """
import os, sys
parent, i = int(sys.argv[1]), 0
while True:
    i += 1
    if not i & 0xFFFFF and os.getppid() != parent:
        break
"""


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes keeping a core busy each while the block runs (none for ``n == 0``)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"busy_processes: n must be an int >= 0, got {n!r}")
    started = []
    try:
        for _ in range(n):
            started.append(
                subprocess.Popen(
                    [sys.executable, "-c", _SPIN, str(os.getpid())],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield started
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()
