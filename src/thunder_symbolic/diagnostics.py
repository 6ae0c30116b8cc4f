"""Why did a jitted function recompile? The failed prologue checks of each cache miss, with their source.

Every cached program's prologue is watched: when all of them reject a call (a cache miss), the reasons
they gave — for guards recorded by this package, the condition and the source line that created it —
are kept as a :class:`Miss`. :func:`recompile_reasons` returns them; ``THUNDER_SYMBOLIC_LOG=recompiles``
logs each one as it happens (logger ``thunder_symbolic.recompiles``), in the spirit of
``TORCH_LOGS=recompiles``. thunder's own ``cache_misses`` keeps meaning "compiles".
"""

from __future__ import annotations

import collections
import logging
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["Miss", "recompile_reasons"]

log = logging.getLogger("thunder_symbolic.recompiles")
if "recompiles" in os.environ.get("THUNDER_SYMBOLIC_LOG", "").split(","):
    log.setLevel(logging.INFO)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())

KEPT_MISSES = 32


@dataclass(frozen=True)
class Miss:
    """One recompilation: the call that missed and why each cached program rejected it (newest first)."""

    call: int
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return f"call {self.call}: " + "; ".join(self.reasons)


class MissRecordingCache(list):
    """thunder's per-function list of cache entries, watching each entry's prologue for rejections."""

    def __init__(self, name: str, stats: Any):
        super().__init__()
        self.name = name
        self.stats = stats
        self.misses: collections.deque[Miss] = collections.deque(maxlen=KEPT_MISSES)
        self.rejections: list[str] = []

    def append(self, entry) -> None:
        if self:  # a recompilation: every existing entry has just rejected the call
            miss = Miss(self.stats.calls, tuple(reversed(self.rejections)))
            self.misses.append(miss)
            log.info("thunder_symbolic: recompiling %s (compile %d) because %s", self.name, len(self) + 1, miss)
        self.rejections.clear()
        super().append(entry._replace(prologue_fn=self._watch(entry.prologue_fn, len(self))))

    def _watch(self, prologue, index: int):
        rejections = self.rejections

        def watched_prologue(*args, **kwargs):
            try:
                result = prologue(*args, **kwargs)
            except Exception as e:
                rejections.append(f"program {index}: {type(e).__name__}: {e}")
                raise
            rejections.clear()
            return result

        return watched_prologue


def recompile_reasons(jfn) -> list[Miss]:
    """The last recompilations of ``jfn`` (a function or module from ``thunder.jit``), oldest first."""
    stats = getattr(jfn, "_lc_cs", None)
    if stats is None:
        raise TypeError(f"recompile_reasons expects a function returned by thunder.jit, got {type(jfn).__name__}")
    cache = stats.interpreter_cache
    return list(cache.misses) if isinstance(cache, MissRecordingCache) else []
