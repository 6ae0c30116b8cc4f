"""A model-sized check: a 2-layer Llama-style decoder decoding with a growing KV cache.

Parameters (static shapes), RMSNorm, rotary embeddings computed from a symbolic position, causal
attention over a KV cache that grows by one token per step: every step's logits equal eager's, and all
16 decode steps share one compiled program.
"""

import math

import pytest
import torch
from torch import nn

import thunder
import thunder_symbolic
from thunder_symbolic.testing import assert_same
from thunder_symbolic.validate import validate_traces_of

DIM, HEADS, VOCAB, LAYERS = 32, 4, 64, 2
HEAD_DIM = DIM // HEADS


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.out = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x, cos, sin, k_cache, v_cache):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k = torch.cat([k_cache, k], dim=2)
        v = torch.cat([v_cache, v], dim=2)
        total = k.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
        causal = torch.ones(length, total, dtype=torch.bool, device=x.device).tril(total - length)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, length, DIM)
        return self.out(y), k, v


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(DIM), RMSNorm(DIM)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.SiLU(), nn.Linear(2 * DIM, DIM))

    def forward(self, x, cos, sin, k_cache, v_cache):
        attended, k, v = self.attn(self.norm1(x), cos, sin, k_cache, v_cache)
        x = x + attended
        return x + self.mlp(self.norm2(x)), k, v


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))

    def forward(self, tokens, position, caches):
        positions = torch.arange(position, position + tokens.shape[1], device=tokens.device).float()
        freqs = torch.outer(positions, self.inv_freq)
        cos, sin = freqs.cos(), freqs.sin()
        x = self.embed(tokens)
        new_caches = []
        for block, (k_cache, v_cache) in zip(self.blocks, caches):
            x, k, v = block(x, cos, sin, k_cache, v_cache)
            new_caches.append((k, v))
        return self.head(self.norm(x)), new_caches


def generate(model, prompt, steps):
    """Greedy decoding; yields the logits of the prefill and of every decode step."""
    empty = torch.zeros(1, HEADS, 0, HEAD_DIM, device=prompt.device)
    caches = [(empty, empty) for _ in range(LAYERS)]
    tokens, position = prompt, 0
    for _ in range(steps + 1):
        logits, caches = model(tokens, position, caches)
        yield logits
        position += tokens.shape[1]
        tokens = logits[:, -1:].argmax(-1)


@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))],
)
def test_decoder_decodes_16_steps_with_one_compile(device):
    torch.manual_seed(0)
    model = Decoder().eval().to(device)
    jmodel = thunder.jit(model, cache="symbolic values")
    prompt = torch.randint(0, VOCAB, (1, 5), device=device)
    compiles_after_prefill = None
    with torch.no_grad():
        for step, (actual, expected) in enumerate(zip(generate(jmodel, prompt, 16), generate(model, prompt, 16))):
            assert_same(actual, expected, path=f"step {step} logits", rtol=1e-4, atol=1e-4)
            validate_traces_of(jmodel)
            if step == 0:
                compiles_after_prefill = thunder.cache_misses(jmodel)
    assert compiles_after_prefill == 1
    assert thunder.cache_misses(jmodel) - compiles_after_prefill == 1, "decode steps must share one program"


def test_decoder_trains_on_varying_sequence_lengths_with_one_compile():
    # Training steps (prefill with a backward) over 4 sequence lengths: the loss and every parameter's
    # gradient equal eager's, from one program with its backward.
    torch.manual_seed(0)
    model = Decoder()
    jmodel = thunder.jit(model, cache="symbolic values")
    empty = torch.zeros(1, HEADS, 0, HEAD_DIM)
    caches = [(empty, empty) for _ in range(LAYERS)]
    parameters = list(model.parameters())
    for length in (6, 9, 4, 7):
        tokens = torch.randint(0, VOCAB, (1, length + 1))
        losses = []
        for run in (jmodel, model):
            logits, _ = run(tokens[:, :-1], 0, caches)
            losses.append(nn.functional.cross_entropy(logits[0], tokens[0, 1:]))
        assert_same(losses[0], losses[1], path=f"length {length} loss", rtol=1e-4, atol=1e-5)
        actual, expected = (torch.autograd.grad(loss, parameters) for loss in losses)
        for (name, _), a, e in zip(model.named_parameters(), actual, expected):
            assert_same(a, e, path=f"length {length} gradient of {name}", rtol=1e-4, atol=1e-5)
        validate_traces_of(jmodel)
    assert thunder.cache_misses(jmodel) == 1, thunder_symbolic.recompile_reasons(jmodel)
