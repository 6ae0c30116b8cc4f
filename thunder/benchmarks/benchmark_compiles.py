"""Compiles and prologue guards per program under ``cache="symbolic values"``, on ordinary dynamic-shape programs.

Each program is called on at least 4 argument sets whose sizes (and int arguments) vary the way LLM
inference varies them; the table gives the compiles and the guards the last program's prologue checks
(counted in the prologue trace, so the same command measures an older checkout of this package:
``PYTHONPATH=<checkout>/src python thunder/benchmarks/benchmark_compiles.py``). Outputs are compared with
eager's on every call.

    python thunder/benchmarks/benchmark_compiles.py [--json]
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch

import thunder


def new_factories(x):
    ones = x.new_ones((x.shape[0], 3))
    return x.new_zeros(x.shape[0], 3) + ones + x.new_full((x.shape[0], 3), 2.0) + x.new_empty(x.shape[0], 3).zero_()


def narrow(x, start, length):
    return x.narrow(0, start, length) * 2


def narrow_from_the_end(x, length):
    return torch.narrow(x, 0, -length, length) + 1


def chunk_in_two(x):
    a, b = x.chunk(2)
    return a.sum(0) + b.sum(0)


def length_times(x):
    return x * len(x)


def split_by_four(x):
    return [piece * 2 for piece in x.split(4)]


def cat_of_two_halves(x, n):
    return torch.cat([x[:n], x[n:] * 2])


def arange_from_an_int(x, start):
    return x + torch.arange(start, start + x.shape[1])


def sum_over_an_int_dim(a, s):
    return (a * s).sum(s)


def cat_reshape_arange_softmax(x, k):
    y = torch.cat([x, x[:, :k]], dim=1)
    y = y.reshape(x.shape[0], -1, 2) if y.shape[1] % 2 == 0 else y.reshape(x.shape[0], -1, 1)
    positions = torch.arange(0, y.shape[1])
    return torch.softmax(y + positions[None, :, None], dim=1)


def branches_on_thresholds(x):
    taken = 0
    for threshold in range(16):
        if x.shape[0] > threshold:
            taken += 1
    return x + taken


def attention_over_a_growing_cache(q, k_cache, v_cache, k_new, v_new, position):
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    scores = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
    mask = torch.arange(k.shape[1]) <= position + q.shape[1] - 1
    return (scores * mask) @ v


def repeat_a_growing_cache(cache, new):
    """A KV cache grown by one step and repeated for two query heads per KV head (Llama's repeat_kv): the
    length after the cat is the one Dynamo writes as ``torch.sym_sum``."""
    keys = torch.cat([cache, new], dim=-2)
    batch, heads, length, dim = keys.shape
    return keys[:, :, None].expand(batch, heads, 2, length, dim).reshape(batch, heads * 2, length, dim) * 2


def heads_by_a_size(x, w):
    """Attention's split into heads as Llama computes it: a view to ``x.shape[:-1] + (heads, -1)``, a
    ``torch.Size`` of the input's sizes."""
    return (x @ w).view(x.shape[:-1] + (2, -1)).sum(-1)


def _x(*shape):
    return torch.randn(*shape)


def rotary_complex(x, angles):
    """Rotary embedding as Llama 4 computes it: pairs of features rotated as complex numbers."""
    rotations = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rotations).flatten(-2).type_as(x)


def _decode_step(n):
    return (_x(2, 1, 8), _x(2, n, 8), _x(2, n, 8), _x(2, 1, 8), _x(2, 1, 8), n)


# name -> (function, argument sets): each compiles once under symbolic values.
PROGRAMS = {
    "new_zeros/new_ones/new_full/new_empty": (new_factories, [(_x(n, 3),) for n in (3, 4, 5, 7)]),
    "narrow with int arguments": (narrow, [(_x(8, 2), 1, 3), (_x(9, 2), 2, 4), (_x(10, 2), 0, 5), (_x(12, 2), 3, 6)]),
    "narrow from the end": (narrow_from_the_end, [(_x(8, 2), 3), (_x(9, 2), 4), (_x(10, 2), 2), (_x(12, 2), 12)]),
    "chunk(2) of a varying dim": (chunk_in_two, [(_x(n, 2),) for n in (6, 7, 10, 13)]),
    "len(x)": (length_times, [(_x(n, 2),) for n in (3, 4, 5, 6)]),
    "split(4) into 2 pieces": (split_by_four, [(_x(n, 2),) for n in (8, 7, 6, 5)]),
    "cat of pieces of equal length": (cat_of_two_halves, [(_x(6, 2), 2), (_x(6, 3), 3), (_x(8, 2), 4), (_x(9, 2), 5)]),
    "arange(start, start + size)": (arange_from_an_int, [(_x(2, n), n - 3) for n in (5, 6, 7, 9)]),
    "sum over an int dim": (sum_over_an_int_dim, [(_x(n, 3, 4), 1) for n in (2, 3, 4, 5)]),
    "cat, reshape, arange, softmax": (
        cat_reshape_arange_softmax,
        [(_x(3, 6), 2), (_x(4, 8), 2), (_x(5, 4), 2), (_x(2, 10), 4)],
    ),
    "branches on 16 thresholds": (branches_on_thresholds, [(_x(n, 2),) for n in (20, 30, 17, 40)]),
    "attention over a growing cache": (attention_over_a_growing_cache, [_decode_step(n) for n in (4, 5, 6, 7)]),
    "rotary embedding (complex)": (rotary_complex, [(_x(n, 8), _x(n, 4)) for n in (3, 4, 5, 7)]),
    "repeat a growing KV cache": (repeat_a_growing_cache, [(_x(1, 2, n, 4), _x(1, 2, 1, 4)) for n in (3, 4, 5, 7)]),
    "view to a size built from the shape": (heads_by_a_size, [(_x(2, n, 8), _x(8, 8)) for n in (3, 4, 5, 7)]),
}


def prologue_guards(jfn) -> int:
    """The guards the last program's prologue checks (``check_symbolic_guards``), late guards excluded."""
    bsyms = thunder.last_prologue_traces(jfn)[-1].bound_symbols
    return sum(len(b.args[1]) for b in bsyms if b.sym.name == "check_symbolic_guards")


def _same(actual, expected) -> bool:
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    return torch.allclose(actual, expected, atol=1e-5)


def measure(fn, argument_sets) -> dict:
    jfn = thunder.jit(fn, cache="symbolic values")
    matches = True
    for arguments in argument_sets:
        matches &= _same(jfn(*arguments), fn(*arguments))
    return {"compiles": thunder.cache_misses(jfn), "guards": prologue_guards(jfn), "matches_eager": matches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = {name: measure(fn, argument_sets) for name, (fn, argument_sets) in PROGRAMS.items()}
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'program':40} {'compiles':>8} {'guards':>7}  matches eager")
    for name, row in rows.items():
        print(f"{name:40} {row['compiles']:8d} {row['guards']:7d}  {row['matches_eager']}")
    compiles, guards = (sum(row[key] for row in rows.values()) for key in ("compiles", "guards"))
    print(f"{'total':40} {compiles:8d} {guards:7d}  {all(row['matches_eager'] for row in rows.values())}")


if __name__ == "__main__":
    main()
