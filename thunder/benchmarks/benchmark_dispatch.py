"""Per-call overhead of small dynamic-shape programs: eager, torch.compile, thunder's two caches.

In a decode loop the work per step is small, so the cost of each call is the throughput. Every program
here runs on a cycle of inputs of different shapes (or int arguments); after a warm-up that compiles
whatever each mode compiles, steady-state calls are timed, all modes in one process on the same inputs.

    python thunder/benchmarks/benchmark_dispatch.py [--calls 3000] [--only elementwise,matmul] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from collections.abc import Callable

import thunder
import torch

import thunder_symbolic

MODES = ("eager", "torch.compile", "thunder constant values", "thunder symbolic values")


def elementwise(x):
    return x * 2 + 1


def slice_by_int(x, n):
    return x[:n] * 2


def kv_cache_append(cache, k):
    return torch.cat([cache, k], dim=1)


class _Layer:
    def __init__(self, length: int):
        self.keys = torch.randn(1, length, 16)


class WindowCache:
    """A cache object updated in place, as transformers' caches are: each layer's keys slide by the new token's.
    The program stores into objects that existed before the call (a side effect replayed on every call)."""

    def __init__(self, length: int, layers: int = 2):
        self.layers = [_Layer(length) for _ in range(layers)]


def cache_update(cache, k):
    out = k
    for layer in cache.layers:
        layer.keys = torch.cat([layer.keys[:, 1:], out], dim=1)
        out = layer.keys.mean(1, keepdim=True)
    return out


def matmul(x, w):
    return x @ w


def branch_on_size(x):
    if x.shape[0] > 8:
        return x * 2
    return x - 1


def repeat_by_size(x):
    """One program per size (a Python loop over it): 3 cached programs, the call's own one tried first."""
    for _ in range(x.shape[0]):
        x = x * 2
    return x


def python_arguments(x, mask, cfg, dtype, act):
    """HF-style arguments: an optional mask, a config dict, a dtype and a callable (each checked per call)."""
    if mask is not None:
        x = x.masked_fill(mask, 0.0)
    return act(x.to(dtype) * cfg["scale"])


class ScaledMLP(torch.nn.Module):
    """A module whose forward reads Python attributes (None, a float, a callable) besides its parameters."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)
        self.act, self.scale, self.dropout = torch.nn.functional.gelu, 0.5, None

    def forward(self, x):
        y = self.down(self.act(self.up(x)))
        if self.dropout is not None:
            y = self.dropout(y)
        return y * self.scale


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention (causal, 2 heads) and an MLP, over a varying sequence."""

    def __init__(self, width: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attention = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attention.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


def centered_by_row(x):
    return (x - x.mean(-1, keepdim=True)) / x.amax(-1, keepdim=True)


def layer_norm_of_last_dim(x):
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def count_down(x, n):
    while n > 0:
        x = x * 2
        n -= 1
    return x


def mask_below(x, n):
    return x.masked_fill(torch.arange(x.shape[1]) < n, 0.0)


def causal_mask(x):
    length = x.shape[-1]
    return x.masked_fill(torch.arange(length)[:, None] < torch.arange(length)[None, :], float("-inf")).softmax(-1)


def slice_by_two_ints(x, start, stop):
    return x[start:stop] * 2


def chunk_halves(x):
    a, b = x.chunk(2, dim=-1)
    return a * torch.sigmoid(b)


def outer_product(x, y):
    return x[:, None] * y[None, :]


def programs() -> dict[str, tuple[Callable, list[tuple]]]:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16)).eval()
    w = torch.randn(16, 8)
    return {
        "elementwise": (elementwise, [(torch.randn(n, 16),) for n in (3, 5, 7, 9)]),
        "slice by int": (slice_by_int, [(torch.randn(12, 16), n) for n in (2, 4, 6, 8)]),
        "KV-cache append": (kv_cache_append, [(torch.randn(1, n, 16), torch.randn(1, 1, 16)) for n in (4, 5, 6, 7)]),
        "cache updated in place": (cache_update, [(WindowCache(n), torch.randn(1, 1, 16)) for n in (4, 5, 6, 7)]),
        "matmul": (matmul, [(torch.randn(n, 16), w) for n in (3, 5, 7, 9)]),
        "branch on size": (branch_on_size, [(torch.randn(n, 16),) for n in (4, 6, 10, 12)]),
        "small module": (mlp, [(torch.randn(n, 16),) for n in (3, 5, 7, 9)]),
        "3 cached programs": (repeat_by_size, [(torch.randn(n, 16),) for n in (1, 2, 3)]),
        "while on an int": (count_down, [(torch.randn(4, 16), n) for n in (1, 2, 3)]),
        "transformer block": (Block().eval(), [(torch.randn(1, n, 16),) for n in (3, 5, 7, 9)]),
        "keepdim reductions": (centered_by_row, [(torch.randn(n, 16),) for n in (3, 5, 7, 9)]),
        "layer norm": (layer_norm_of_last_dim, [(torch.randn(4, n),) for n in (8, 12, 16, 24)]),
        "mask from a size": (mask_below, [(torch.randn(4, n), n // 2) for n in (8, 12, 16, 24)]),
        "causal mask": (causal_mask, [(torch.randn(2, n, n),) for n in (3, 5, 7, 9)]),
        "slice by two ints": (slice_by_two_ints, [(torch.randn(12, 16), n, n + 3) for n in (1, 2, 4, 6)]),
        "chunk": (chunk_halves, [(torch.randn(4, 2 * n),) for n in (3, 5, 7, 9)]),
        "outer product": (outer_product, [(torch.randn(n), torch.randn(n + 2)) for n in (3, 5, 7, 9)]),
        "python arguments": (
            python_arguments,
            [(torch.randn(n, 16), None, {"scale": 2.0}, torch.float32, torch.relu) for n in (3, 5, 7, 9)],
        ),
        "module attributes": (ScaledMLP().eval(), [(torch.randn(n, 16),) for n in (3, 5, 7, 9)]),
    }


def compiled(mode: str, fn: Callable) -> Callable:
    if mode == "eager":
        return fn
    if mode == "torch.compile":
        return torch.compile(fn)
    return thunder.jit(fn, cache=mode.removeprefix("thunder "))


def time_per_call(fn: Callable, inputs: list[tuple], calls: int) -> list[float]:
    """Microseconds per call, cycling through the inputs; the first rounds warm up (and compile)."""
    with torch.no_grad():
        for _ in range(3):
            for args in inputs:
                fn(*args)
        samples = []
        for i in range(calls):
            args = inputs[i % len(inputs)]
            start = time.perf_counter_ns()
            fn(*args)
            samples.append((time.perf_counter_ns() - start) / 1e3)
    return samples


def measure(calls: int, only: set[str] | None) -> dict:
    results = {}
    for name, (fn, inputs) in programs().items():
        if only and name not in only:
            continue
        row = {}
        for mode in MODES:
            samples = time_per_call(compiled(mode, fn), inputs, calls)
            q1, median, q3 = statistics.quantiles(samples, n=4)
            row[mode] = {"median_us": median, "iqr_us": q3 - q1}
        results[name] = row
    return results


def geometric_mean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def print_table(results: dict) -> None:
    header = f"{'program':20}" + "".join(f"{m:>26}" for m in MODES)
    print(header)
    for name, row in results.items():
        cells = "".join(f"{row[m]['median_us']:>14.1f} ±{row[m]['iqr_us']:<9.1f}" for m in MODES)
        print(f"{name:20}{cells}")
    means = {m: geometric_mean(row[m]["median_us"] for row in results.values()) for m in MODES}
    print(f"{'geometric mean':20}" + "".join(f"{means[m]:>14.1f}{'':11}" for m in MODES))
    print("\nratios of the geometric means (lower is faster):")
    for m in MODES[1:]:
        print(
            f"  {m:26} {means[m] / means['eager']:6.2f} x eager   {means[m] / means['torch.compile']:6.2f} x torch.compile"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    only = {name.strip() for name in args.only.split(",") if name.strip()} or None
    results = measure(args.calls, only)
    if args.json:
        print(json.dumps({"thunder_symbolic_active": thunder_symbolic.is_active(), "results": results}, indent=2))
    else:
        print(f"thunder-symbolic active: {thunder_symbolic.is_active()}; median µs per call ± IQR\n")
        print_table(results)


if __name__ == "__main__":
    main()
