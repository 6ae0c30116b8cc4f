"""Per-call cost of prologue guards under ``cache="symbolic values"``.

Jits a function whose trace records N guards and times steady-state calls that hit the cache, for
several N: ``--kind sizes`` (branches on ``x.shape[0] > t`` for t < N: the guard algebra keeps only the
strongest), ``--kind distinct`` (``x.shape[0] != 1000 + t``: none implies another, so N are checked, and
the added cost per guard can be read off) or ``--kind values`` (N optional arguments passed as None, each
an identity check). Each row gives the guards the prologue checks and the conditions tracing recorded
(``thunder_symbolic.explain``). torch.compile runs the same calls in the same process, for comparison.
With ``--compare-upstream`` it also times the calls with the patch set reverted (upstream 0.2.6, which
checks none of them).

    python thunder/benchmarks/benchmark_guards.py [--kind sizes|distinct|values] [--guards 0 1 8 32] [--calls 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import torch

import thunder
import thunder_symbolic


def make_branchy(n_guards: int):
    """A function whose trace decides ``n_guards`` size branches (all taken the same way at run time)."""

    def fn(x):
        taken = 0
        for threshold in range(n_guards):
            if x.shape[0] > threshold:
                taken += 1  # a Python constant: the computation is the same for every N
        return x + taken

    return fn


def make_distinct(n_guards: int):
    """A function whose trace decides ``n_guards`` size comparisons none of which implies another."""

    def fn(x):
        taken = 0
        for excluded in range(n_guards):
            if x.shape[0] != 1000 + excluded:
                taken += 1
        return x + taken

    return fn


def make_optional(n_guards: int):
    """A function of ``n_guards`` optional arguments, each read (``is not None``) and passed as None."""
    names = [f"a{i}" for i in range(n_guards)]
    body = "".join(f"    if {name} is not None:\n        x = x + {name}\n" for name in names)
    namespace: dict = {}
    source = f"def fn(x, {''.join(n + '=None, ' for n in names)}):\n{body}    return x + 1\n"
    exec(source, namespace)  # noqa: S102  (a function of N parameters, generated)
    return namespace["fn"]


KINDS = {"sizes": make_branchy, "distinct": make_distinct, "values": make_optional}


def time_calls(jfn, x, calls: int, *args) -> float:
    """Median per-call time in microseconds over ``calls`` calls, after warming up."""
    for _ in range(10):
        jfn(x, *args)
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        jfn(x, *args)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e3


def arguments(kind: str, n_guards: int) -> tuple:
    return (None,) * n_guards if kind == "values" else ()


def measure(kind: str, n_guards: int, calls: int) -> dict:
    jfn = thunder.jit(KINDS[kind](n_guards), cache="symbolic values")
    x = torch.randn(64, 4)
    per_call = time_calls(jfn, x, calls, *arguments(kind, n_guards))
    misses = thunder.cache_misses(jfn)
    # sanity: the guards held, one compile (for "sizes": for every size above the largest threshold)
    jfn(torch.randn(65, 4), *arguments(kind, n_guards))
    assert thunder.cache_misses(jfn) == misses == 1
    (program,) = thunder_symbolic.explain(jfn)
    checked = len(program.guards) + program.value_checks
    observed = program.observed + program.value_checks
    return {"guards": n_guards, "checked": checked, "observed": observed, "us_per_call": per_call}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(KINDS), default="sizes")
    parser.add_argument("--guards", type=int, nargs="+", default=[0, 1, 8, 32])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--compare-upstream", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    rows = [{"variant": "patched", **measure(args.kind, n, args.calls)} for n in args.guards]
    for n in args.guards:
        compiled = torch.compile(KINDS[args.kind](n), dynamic=True)
        per_call = time_calls(compiled, torch.randn(64, 4), args.calls, *arguments(args.kind, n))
        rows.append({"variant": "torch.compile", "guards": n, "us_per_call": per_call})
    if args.compare_upstream:
        thunder_symbolic.revert()
        for n in args.guards:
            jfn = thunder.jit(KINDS[args.kind](n), cache="symbolic values")
            per_call = time_calls(jfn, torch.randn(64, 4), args.calls, *arguments(args.kind, n))
            rows.append({"variant": "upstream", "guards": n, "us_per_call": per_call})
        thunder_symbolic.apply()

    if args.json:
        print(json.dumps(rows, indent=2))
        return
    base = {r["variant"]: r["us_per_call"] for r in rows if r["guards"] == args.guards[0]}
    print(f"{args.kind} guards; median µs per call; checked (observed) = the prologue's checks (conditions traced)")
    print(f"{'variant':14} {'N':>4} {'checked (observed)':>19} {'us/call':>9} {'added vs first':>15}")
    for r in rows:
        counts = f"{r['checked']} ({r['observed']})" if "checked" in r else "-"
        added = r["us_per_call"] - base[r["variant"]]
        print(f"{r['variant']:14} {r['guards']:4d} {counts:>19} {r['us_per_call']:9.2f} {added:15.2f}")


if __name__ == "__main__":
    main()
