"""The status report: versions, activation state and each patch with its upstream target."""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

from thunder_symbolic.controls import CONTROLS


@dataclass(frozen=True)
class PatchInfo:
    target: str
    state: str  # "applied", "pending import", "unavailable: <what it needs>" or "not applied"
    kind: str  # "wraps", "replaces" or "adds"
    summary: str
    why: str
    upstream: str
    defined_in: str


@dataclass(frozen=True)
class Status:
    thunder_version: str
    torch_version: str
    python_version: str
    active: bool
    activation: str
    patches: tuple[PatchInfo, ...]

    def __str__(self) -> str:
        lines = [
            f"thunder-symbolic {__import__('thunder_symbolic').__version__}",
            f"  lightning-thunder {self.thunder_version}, torch {self.torch_version}, Python {self.python_version}",
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
    from thunder_symbolic import _registry, patches  # noqa: F401  (patches: so that the list is complete)

    applied = {a.patch.target for a in _registry.applied_patches()}
    pending = _registry.pending_modules()
    infos = []
    for p in _registry.registered_patches():
        if p.target in applied:
            state = "applied"
        elif _registry.is_active() and p.module_name in pending:
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
        active=_registry.is_active(),
        activation=activation,
        patches=tuple(infos),
    )
