"""The benchmark's MoE replacement (thunder/benchmarks/layers_for_inference_benchmark.py) on one process.

It must compute Llama-4's MoE (each token through its top-k experts, input scaled by the sigmoid of the
router logit, plus the shared expert), and run under thunder.jit with symbolic values: one compile for
every token count, outputs equal eager's.
"""

import sys
from pathlib import Path

import pytest
import torch
from transformers import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

import thunder
from thunder_symbolic.testing import check_against_eager

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from layers_for_inference_benchmark import Llama4MoE, replace_moe_layers  # noqa: E402

HIDDEN, EXPERTS = 32, 4


def transformers_moe(top_k: int, dtype=torch.float32) -> Llama4TextMoe:
    config = Llama4TextConfig(
        hidden_size=HIDDEN, intermediate_size=HIDDEN, num_local_experts=EXPERTS, num_experts_per_tok=top_k
    )
    moe = Llama4TextMoe(config)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return moe.to(dtype)


def by_definition(moe: Llama4TextMoe, x: torch.Tensor) -> torch.Tensor:
    """Llama-4's MoE written out token by token with transformers' weights."""
    x = x.reshape(-1, HIDDEN)
    out = moe.shared_expert(x)
    top_logits, top_experts = torch.topk(x @ moe.router.weight.t(), moe.top_k, dim=1)
    for t in range(x.shape[0]):
        for logit, e in zip(top_logits[t], top_experts[t]):
            scaled = x[t] * torch.sigmoid(logit)
            gate, up = (scaled @ moe.experts.gate_up_proj[e]).chunk(2)
            out[t] += (up * torch.nn.functional.silu(gate)) @ moe.experts.down_proj[e]
    return out


@pytest.mark.parametrize("top_k", [1, 2])
def test_replacement_computes_llama4_moe(top_k):
    moe = transformers_moe(top_k)
    replacement = Llama4MoE.from_transformers(moe)
    with torch.no_grad():
        for tokens in (1, 5, 12):
            x = torch.randn(2, tokens, HIDDEN)
            out, logits = replacement(x)
            torch.testing.assert_close(out, by_definition(moe, x), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(logits, moe.router(x.reshape(-1, HIDDEN))[1])


def test_replacement_equals_transformers_on_one_token():
    # transformers 4.55's Llama4TextMoe pairs router scores with rows correctly only for a single token
    # (its router returns [tokens, experts] scores, its MoE reads them as [experts, tokens]); decoding
    # one token at a time, the two agree.
    moe = transformers_moe(1)
    replacement = Llama4MoE.from_transformers(moe)
    with torch.no_grad():
        x = torch.randn(1, 1, HIDDEN)
        torch.testing.assert_close(replacement(x)[0], moe(x)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_replacement_under_symbolic_values_compiles_once(dtype):
    replacement = Llama4MoE.from_transformers(transformers_moe(2, dtype))
    args = [(torch.randn(2, tokens, HIDDEN, dtype=dtype),) for tokens in (3, 5, 8, 13)]
    with torch.no_grad():
        jf = check_against_eager(replacement, args, compiles=1)
    assert "_grouped_mm" in str(thunder.last_traces(jf)[-1])


def test_replace_moe_layers_swaps_every_transformers_moe():
    model = torch.nn.ModuleDict({"a": transformers_moe(1), "b": torch.nn.Sequential(transformers_moe(1))})
    assert replace_moe_layers(model) == 2
    assert isinstance(model["a"], Llama4MoE) and isinstance(model["b"][0], Llama4MoE)


def test_replacement_gradients_equal_eager_from_one_program():
    # thunder 0.2.6 has no grad rule for _grouped_mm (and its meta rejects the weight gradient's layout,
    # two 2-D operands): the experts failed in grad mode.
    torch.manual_seed(0)
    replacement = Llama4MoE.from_transformers(transformers_moe(2))
    jf = thunder.jit(replacement, cache="symbolic values")
    for tokens in (3, 5, 8):
        x = torch.randn(2, tokens, HIDDEN, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        (out, logits), (expected, expected_logits) = jf(x), replacement(x_ref)
        torch.testing.assert_close(out, expected)
        cotangent = torch.randn_like(expected)
        parameters = list(replacement.parameters())
        grads = torch.autograd.grad((out * cotangent).sum() + logits.sum(), [x, *parameters])
        expected_grads = torch.autograd.grad((expected * cotangent).sum() + expected_logits.sum(), [x_ref, *parameters])
        for i, (g, e) in enumerate(zip(grads, expected_grads)):
            torch.testing.assert_close(g, e, msg=f"{tokens} tokens, gradient {i}")
    assert thunder.cache_misses(jf) == 1
