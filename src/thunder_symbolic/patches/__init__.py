"""One module per upstream file the patch set changes, named after it.

Importing this package registers every patch (see :mod:`thunder_symbolic.activation.registry`); applying them
is :func:`thunder_symbolic.apply`'s job.
"""

from thunder_symbolic.patches import (
    clang_init,  # noqa: F401  thunder/clang/__init__.py
    clang_utils,  # noqa: F401  thunder/clang/utils.py
    core_baseutils,  # noqa: F401  thunder/core/baseutils.py
    core_codeutils,  # noqa: F401  thunder/core/codeutils.py
    core_dtypes,  # noqa: F401  thunder/core/dtypes.py
    core_interpreter,  # noqa: F401  thunder/core/interpreter.py
    core_jit_ext,  # noqa: F401  thunder/core/jit_ext.py
    core_module,  # noqa: F401  thunder/core/module.py
    core_prims,  # noqa: F401  thunder/core/prims.py
    core_proxies,  # noqa: F401  thunder/core/proxies.py
    core_pytree,  # noqa: F401  thunder/core/pytree.py
    core_symbol,  # noqa: F401  thunder/core/symbol.py
    core_trace_interpreter,  # noqa: F401  thunder/core/trace_interpreter.py
    core_transform_common,  # noqa: F401  thunder/core/transform_common.py
    core_transforms,  # noqa: F401  thunder/core/transforms.py
    core_update_aliases,  # noqa: F401  thunder/core/update_aliases.py
    core_utils,  # noqa: F401  thunder/core/utils.py
    core_vjp_utils,  # noqa: F401  thunder/core/vjp_utils.py
    dynamo_compiler,  # noqa: F401  thunder/dynamo/compiler.py
    dynamo_utils,  # noqa: F401  thunder/dynamo/utils.py
    executors_nvfuserex_impl,  # noqa: F401  thunder/executors/nvfuserex_impl.py
    executors_passes,  # noqa: F401  thunder/executors/passes.py
    executors_pythonex,  # noqa: F401  thunder/executors/pythonex.py
    executors_sdpaex,  # noqa: F401  thunder/executors/sdpaex.py
    executors_torch_compile,  # noqa: F401  thunder/executors/torch_compile.py
    executors_torchex,  # noqa: F401  thunder/executors/torchex.py
    extend_init,  # noqa: F401  thunder/extend/__init__.py
    thunder_init,  # noqa: F401  thunder/__init__.py
    torch_experimental,  # noqa: F401  thunder/torch/experimental/
    torch_init,  # noqa: F401  thunder/torch/__init__.py
    torch_langctx,  # noqa: F401  thunder/torch/langctx.py
    transforms_autodiff,  # noqa: F401  thunder/transforms/autodiff.py
)
