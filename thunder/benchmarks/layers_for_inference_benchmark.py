"""The MoE replacement of the inference benchmark: Llama-4's routed experts as grouped matmuls.

transformers' ``Llama4TextMoe`` runs every expert on every token (a batched matmul over all experts,
the unselected ones fed zeros) and cannot be tensor-parallel (its experts are one fused parameter).
:class:`Llama4MoE` computes the same function the way inference engines do: tokens sorted by their
expert, one ``torch._grouped_mm`` per projection over the contiguous groups, and expert weights that
tensor parallelism shards over the intermediate dimension (:class:`GroupedLinearColwiseParallel`,
:class:`GroupedLinearRowwiseParallel`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ParallelStyle

__all__ = [
    "GroupedLinear",
    "GroupedLinearColwiseParallel",
    "GroupedLinearRowwiseParallel",
    "GroupedSwiGLU",
    "Llama4MoE",
    "replace_moe_layers",
]


def _local(weight: torch.Tensor) -> torch.Tensor:
    return weight.to_local() if isinstance(weight, DTensor) else weight


class GroupedLinear(nn.Module):
    """One linear map per expert; ``forward(x, offsets)`` applies expert ``e`` to rows ``offsets[e-1]:offsets[e]``.

    ``weight`` is ``[experts, in_features, out_features]``. Under tensor parallelism each rank holds a slice
    of every expert; a row-parallel one sums the partial results over the mesh (``partial_over``).
    """

    def __init__(self, experts: int, in_features: int, out_features: int, *, dtype=None, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, in_features, out_features, dtype=dtype, device=device))
        self.partial_over = None

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        out = torch._grouped_mm(x, _local(self.weight), offsets)
        if self.partial_over is not None:
            out = DTensor.from_local(out, self.partial_over, [Partial()]).redistribute(self.partial_over, [Replicate()])
            out = out.to_local()
        return out


class GroupedSwiGLU(nn.Module):
    """The routed experts: ``down(silu(gate(x)) * up(x))`` per expert, as three grouped matmuls."""

    def __init__(self, experts: int, hidden: int, intermediate: int, *, dtype=None, device=None):
        super().__init__()
        self.gate_proj = GroupedLinear(experts, hidden, intermediate, dtype=dtype, device=device)
        self.up_proj = GroupedLinear(experts, hidden, intermediate, dtype=dtype, device=device)
        self.down_proj = GroupedLinear(experts, intermediate, hidden, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x, offsets)) * self.up_proj(x, offsets), offsets)


class Llama4MoE(nn.Module):
    """Llama-4's MoE block (sigmoid-scored top-k routing, scores applied to the expert input, a shared
    expert added) with grouped-matmul experts. Returns ``(output, router_logits)`` as transformers' does."""

    def __init__(self, router: nn.Linear, shared_expert: nn.Module, routed_experts: GroupedSwiGLU, top_k: int):
        super().__init__()
        self.router = router
        self.shared_expert = shared_expert
        self.routed_experts = routed_experts
        self.top_k = top_k
        self.num_experts = router.out_features

    @classmethod
    def from_transformers(cls, moe: nn.Module) -> Llama4MoE:
        """The same function as ``moe`` (a ``Llama4TextMoe``), sharing its router and shared expert."""
        fused = moe.experts.gate_up_proj  # [experts, hidden, 2 * intermediate]: gate, then up
        experts, hidden, twice = fused.shape
        intermediate = twice // 2
        routed = GroupedSwiGLU(experts, hidden, intermediate, dtype=fused.dtype, device=fused.device)
        with torch.no_grad():
            routed.gate_proj.weight.copy_(fused[..., :intermediate])
            routed.up_proj.weight.copy_(fused[..., intermediate:])
            routed.down_proj.weight.copy_(moe.experts.down_proj)
        router = nn.Linear(hidden, experts, bias=False, dtype=fused.dtype, device=fused.device)
        with torch.no_grad():
            router.weight.copy_(moe.router.weight)
        return cls(router, moe.shared_expert, routed, moe.top_k)

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = hidden_states.shape[-1]
        x = hidden_states.reshape(-1, hidden)
        router_logits = self.router(x)
        top_logits, top_experts = torch.topk(router_logits, self.top_k, dim=1)
        scores = torch.sigmoid(top_logits.float()).to(x.dtype)

        # One row per (token, chosen expert), token-major, scaled by its score, then grouped by expert.
        experts = top_experts.reshape(-1)
        rows = x[:, None, :].expand(-1, self.top_k, -1).reshape(-1, hidden) * scores.reshape(-1, 1)
        order = torch.argsort(experts, stable=True)
        counts = (experts[:, None] == torch.arange(self.num_experts, device=x.device)).sum(0)
        offsets = counts.cumsum(0).to(torch.int32)
        routed = self.routed_experts(rows[order], offsets)[torch.argsort(order)]

        out = self.shared_expert(x) + routed.reshape(-1, self.top_k, hidden).sum(1)
        return out, router_logits


def replace_moe_layers(model: nn.Module) -> int:
    """Replace every transformers ``Llama4TextMoe`` in ``model`` by a :class:`Llama4MoE`; returns how many."""
    from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Llama4TextMoe):
                setattr(parent, name, Llama4MoE.from_transformers(child))
                replaced += 1
    return replaced


class _ShardedGroupedLinear(ParallelStyle):
    dim: int

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        if not isinstance(module, GroupedLinear):
            raise TypeError(f"{type(self).__name__} applies to GroupedLinear modules, got {type(module).__name__}")
        sharded = distribute_tensor(module.weight.detach(), device_mesh, [Shard(self.dim)])
        module.weight = nn.Parameter(sharded, requires_grad=module.weight.requires_grad)
        return module


class GroupedLinearColwiseParallel(_ShardedGroupedLinear):
    """Shards every expert's output features: each rank computes its slice of every expert's output."""

    dim = 2


class GroupedLinearRowwiseParallel(_ShardedGroupedLinear):
    """Shards every expert's input features; the partial results are summed over the mesh."""

    dim = 1

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        module = super()._apply(module, device_mesh)
        module.partial_over = device_mesh
        return module
