"""Who asks thunder's sdpa executor for its attention kernel under symbolic values.

The sdpa executor picks flash or memory-efficient attention from fake CUDA tensors of the operands' concrete
sizes, so asking it pins them: on an H200 a tensor-parallel attention without grad compiled once per sequence
length (4 programs for 4 lengths). It is now asked only for a gradient transform (grad mode, whose saved
tensors depend on the kernel); without grad the torch executor's scaled_dot_product_attention lets torch pick
the kernel at each call, as eager does. CPU tensors never reach the choice (the checker refuses them first),
so these tests give the patch a recording checker and watch when it is asked.
"""

import pytest
import torch
import torch.nn.functional as F
from thunder.executors import sdpaex
from thunder.extend import ImplInfo
from thunder.torch import scaled_dot_product_attention

import thunder
from thunder_symbolic.autodiff import gradient_choice
from thunder_symbolic.patches import executors_sdpaex
from thunder_symbolic.testing import check_against_eager


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def operands(length, requires_grad=False):
    return tuple(torch.randn(2, 4, length, 8, requires_grad=requires_grad) for _ in range(3))


@pytest.fixture
def asked(monkeypatch):
    """The patch applied to a checker that records, at each question, whether a gradient transform is chosen
    (and says no, leaving the attention to the torch executor)."""
    questions = []

    def checker(*args, **kwargs):
        questions.append(gradient_choice.is_choosing())
        return False

    fixed = executors_sdpaex._implmap({scaled_dot_product_attention.id: ImplInfo(checker=checker)})
    monkeypatch.setattr(sdpaex.sdpa_ex, "_implmap", fixed)
    return questions


def test_the_installed_checker_is_upstreams_asked_for_gradients_only():
    checker = sdpaex.sdpa_ex._implmap[scaled_dot_product_attention.id].checker
    assert checker.__wrapped__ is sdpaex._scaled_dot_product_attention_checker
    assert not checker(*operands(4), None, 0.0, True, scale=None)  # not choosing a gradient: never asked


def test_attention_without_grad_does_not_ask_for_a_kernel(asked):
    with torch.no_grad():
        check_against_eager(attention, [operands(n) for n in (3, 5, 8)], compiles=1)
    assert asked == []


def test_attention_in_grad_mode_asks_while_its_gradient_is_chosen(asked):
    jf = thunder.jit(attention, cache="symbolic values")
    q, k, v = operands(5, requires_grad=True)
    jf(q, k, v).sum().backward()
    assert asked and all(asked), asked
    torch.testing.assert_close(q.grad, torch.func.grad(lambda q: attention(q, k, v).sum())(q.detach()))
