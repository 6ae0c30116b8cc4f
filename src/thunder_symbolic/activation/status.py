"""The status report: versions, activation state and each patch with its upstream target."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

from thunder_symbolic.activation import registry as _registry
from thunder_symbolic.controls import CONTROLS


@dataclass(frozen=True)
class PatchInfo:
    target: str
    # "applied", "pending import", "unavailable: <what it needs>", "not applied"; import patches:
    # "applied at import", "not needed on torch <version>", "pending import" or "imported before it: not applied"
    state: str
    kind: str  # "wraps", "replaces", "adds" or "at import"
    summary: str
    why: str
    upstream: str
    defined_in: str


@dataclass(frozen=True)
class Status:
    thunder_version: str
    torch_version: str
    python_version: str
    nvfuser: str
    active: bool
    activation: str
    patches: tuple[PatchInfo, ...]

    def __str__(self) -> str:
        lines = [
            f"thunder-symbolic {__import__('thunder_symbolic').__version__}",
            f"  lightning-thunder {self.thunder_version}, torch {self.torch_version}, Python {self.python_version}",
            f"  nvFuser: {self.nvfuser}",
            f"  activation: {self.activation}",
            f"  patches ({len(self.patches)}):",
        ]
        for p in self.patches:
            lines.append(f"    [{p.state}] {p.target} ({p.kind}; {p.defined_in})")
            lines.append(f"        {p.summary}")
            if p.upstream:
                lines.append(f"        upstream: {p.upstream}")
        lines.append("  controls (thunder_symbolic.controls):")
        lines += [f"    {control}\n        {what}" for control, what in CONTROLS]
        return "\n".join(lines)


def status() -> Status:
    """Report the versions, whether the patch set is active and why, and every patch with its target."""
    import torch

    import thunder
    import thunder_symbolic

    try:  # (so that the lists are complete; a patch module that cannot be imported is named by the activation)
        from thunder_symbolic import import_patches, patches  # noqa: F401
    except Exception:
        pass

    applied = {a.patch.target for a in _registry.applied_patches()}
    pending = _registry.pending_modules()
    infos = []
    for p in _registry.registered_patches():
        if p.target in applied:
            state = "applied"
        elif _registry.is_active() and p.trigger_module in pending:
            state = "pending import" if p.is_available() else f"unavailable: {p.requires}"
        else:
            state = "not applied"
        infos.append(
            PatchInfo(
                p.target,
                state,
                "adds" if p.adds else "replaces" if p.replaces else "wraps",
                p.summary,
                p.why,
                p.upstream,
                p.defined_in,
            )
        )
    infos += [_import_patch_info(p, torch.__version__) for p in _registry.registered_import_patches()]
    if _registry.is_active():
        activation = "on"
    elif thunder_symbolic.refused_reason():
        activation = f"refused: {thunder_symbolic.refused_reason()}"
    elif not thunder_symbolic.enabled_by_environment():
        activation = "off (THUNDER_SYMBOLIC=0)"
    else:
        activation = "off (reverted)"
    return Status(
        thunder_version=getattr(thunder, "__version__", "unknown"),
        torch_version=torch.__version__,
        python_version=f"{platform.python_version()} ({sys.implementation.name})",
        nvfuser=_nvfuser_state(),
        active=_registry.is_active(),
        activation=activation,
        patches=tuple(infos),
    )


def _import_patch_info(p, torch_version: str) -> PatchInfo:
    if _registry.import_patched(p.module_name):
        state = "applied at import"
    elif not p.needed():
        state = f"not needed on torch {torch_version}"
    elif p.module_name in sys.modules:
        state = "imported before it: not applied"
    else:
        state = "pending import"
    return PatchInfo(p.target, state, "at import", p.summary, p.why, p.upstream, p.defined_in)


def _nvfuser_state() -> str:
    """nvFuser's version and whether thunder can use it here; its wheels exist for torch 2.9 and 2.10 only."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    from thunder.executors.nvfuserex import nvfuser_available

    found = packages_distributions()
    distributions = found.get("nvfuser_direct", []) + found.get("nvfuser", [])
    if not distributions:
        return "not installed (wheels exist for torch 2.9 and 2.10: the extras nvfuser-torch29, nvfuser-torch210)"
    try:
        installed = f"{distributions[0]} {version(distributions[0])}"
    except PackageNotFoundError:
        installed = distributions[0]
    return f"{installed}, " + ("usable" if nvfuser_available() else "unavailable here (it needs a CUDA GPU)")
