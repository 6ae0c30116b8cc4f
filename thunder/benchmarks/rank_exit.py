"""How a benchmark's torchrun rank ends: without Python's finalization once its output is flushed.

A gloo group outlives ``destroy_process_group`` (DTensor's caches hold its mesh), and its threads release each
finished collective's tensors after the rank has the result, which takes the GIL. A release still pending when
Python finalizes tears the thread down instead, and the rank aborts ("terminate called without an active
exception", pytorch/pytorch#65231). With torch 2.14 on a busy 2-core machine: the tensor-parallel training
benchmark in 6 launches of 16, the inference benchmark (eager, 2 ranks) in 2 of 12.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

__all__ = ["end_rank"]


def end_rank(code: int = 0) -> NoReturn:
    """End this rank with exit status ``code``, its output flushed, without Python's finalization."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
