"""Import patch of ``thunder/torch/default_torch_ops.py``: its table names torch methods that newer torch removed."""

from __future__ import annotations

import contextlib

import torch

from thunder_symbolic.activation.registry import import_patch

# Named-tensor methods torch 2.13 removed; thunder 0.2.6's table of automatically registered operators
# reads each as ``torch.Tensor.<name>`` while the module executes.
REMOVED_TENSOR_METHODS = ("align_as", "align_to", "has_names", "refine_names", "rename")


def _missing() -> list[str]:
    return [name for name in REMOVED_TENSOR_METHODS if not hasattr(torch.Tensor, name)]


def _removed(name: str):
    def removed(*args, **kwargs):
        raise AttributeError(f"torch.Tensor.{name} was removed from torch {torch.__version__}")

    removed.__name__ = removed.__qualname__ = name
    return removed


@import_patch(
    "thunder.torch.default_torch_ops",
    summary="methods torch removed (named tensors, torch 2.13) are left out of the automatically registered operators",
    why="the module lists torch.Tensor.align_as and 4 more named-tensor methods; on torch >= 2.13 reading them "
    "raises AttributeError while thunder is imported, so `import thunder` fails",
    needed=lambda: bool(_missing()),
)
@contextlib.contextmanager
def leave_out_removed_methods():
    """Placeholders stand in for the removed methods while the module executes; afterwards they are taken
    off ``torch.Tensor`` and out of every table of the module, so neither torch nor thunder keeps them."""
    placeholders = {name: _removed(name) for name in _missing()}
    for name, placeholder in placeholders.items():
        setattr(torch.Tensor, name, placeholder)

    def finish(module) -> None:
        stand_ins = set(map(id, placeholders.values()))
        for table in vars(module).values():
            lists = table.values() if isinstance(table, dict) else [table]
            for entries in lists:
                if isinstance(entries, list):
                    entries[:] = [entry for entry in entries if id(entry) not in stand_ins]

    try:
        yield finish
    finally:
        for name in placeholders:
            delattr(torch.Tensor, name)
