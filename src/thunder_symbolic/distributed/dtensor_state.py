"""What the DTensor patches hand to the proxy patches while thunder proxies DTensors.

``patches.torch_experimental`` knows which local tensor is being proxied, and which fake result a DTensor
operation's shape rule gave symbolic shapes to; ``patches.core_proxies`` creates the proxies that need to
know. The shared state lives here, in no patch module.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thunder_symbolic.distributed.dtensor_shapes import (
        DTensorShapes,  # torch.distributed: imported when DTensors run
    )

__all__ = ["local_tensor_provenance", "symbolic_result", "symbolic_shapes_of"]

# (local tensor, its provenance) while proxify_dtensor proxies a DTensor input's local tensor.
local_tensor_provenance: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "thunder_symbolic_local_tensor", default=None
)
# (fake result, its symbolic shapes) for each result of the last DTensor meta function's fake run with a
# shape rule: the meta function then builds its result proxies from those fake results, and these patches
# give them the symbolic shapes (see thunder_symbolic.distributed.dtensor_shapes).
symbolic_result: contextvars.ContextVar[tuple[tuple[Any, DTensorShapes], ...] | None] = contextvars.ContextVar(
    "thunder_symbolic_dtensor_result", default=None
)


def symbolic_shapes_of(fake: Any) -> DTensorShapes | None:
    """The symbolic shapes of a fake result of the last fake run with a rule, when ``fake`` is that result,
    its local tensor or its spec (what meta functions build their result proxies from); else None."""
    for result, shapes in symbolic_result.get() or ():
        if fake is result or fake is getattr(result, "_local_tensor", None) or fake is getattr(result, "_spec", None):
            return shapes
    return None
