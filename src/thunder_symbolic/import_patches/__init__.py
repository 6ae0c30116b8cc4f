"""Import patches: changes made while a thunder module executes (see
:class:`thunder_symbolic.activation.registry.ImportPatch`).

One module per upstream file, named after it like :mod:`thunder_symbolic.patches`; unlike those they
import torch only, because they are registered before thunder is imported.
"""

from thunder_symbolic.import_patches import (
    core_jit_ext,  # noqa: F401  thunder/core/jit_ext.py
    torch_default_torch_ops,  # noqa: F401  thunder/torch/default_torch_ops.py
)
