"""Whether thunder is choosing how to differentiate an operation.

In 0.2.6 an executor's checker answers two questions: whether the executor runs an operation (the
executor pass) and, asked from ``_get_gradfn_and_executor``, whether the executor's own gradient
transform differentiates it. Some checkers need concrete sizes for the second question only (the sdpa
executor picks the kernel whose saved tensors its backward reads); :func:`choosing` lets them tell the two
apart. The patch of ``_get_gradfn_and_executor`` (``patches/core_transforms.py``) owns the entering.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_state = threading.local()


@contextlib.contextmanager
def choosing() -> Iterator[None]:
    """The scope in which thunder picks an operation's gradient transform."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth


def is_choosing() -> bool:
    """True while thunder picks an operation's gradient transform (see :func:`choosing`)."""
    return getattr(_state, "depth", 0) > 0
