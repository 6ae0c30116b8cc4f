"""Memory over long runs: compiling is bounded, and what a jitted function holds goes with it.

Three runs, each printing the process's resident memory (RSS) at checkpoints:

* ``past-limit``: one jitted function called with a new width every call (the default cache compiles a program
  per width). Past its recompile limit (8) it compiles no more and the calls run eagerly: RSS is flat.
* ``past-limit-raise``: the same with ``on_recompile_limit="raise"``: every call past the limit raises before
  compiling, so nothing is built and dropped.
* ``jit-and-delete``: functions jitted, called at two sizes under symbolic values, and deleted: what each held
  (programs, guards, dispatch hints) is freed with it.

    python thunder/benchmarks/benchmark_memory.py [--calls 10000] [--functions 1000] [--json]

"Flat after warm-up" is judged on the printed growth from the first checkpoint after warm-up to the last.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import warnings

import torch

import thunder
import thunder_symbolic


def rss_mb() -> float:
    """The resident set size now (Linux: /proc/self/statm), else the peak (getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def past_limit(calls: int, on_limit: str) -> list[tuple[int, float]]:
    jfn = thunder.jit(scale, on_recompile_limit=on_limit)
    points = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(calls):
            x = torch.ones(16 + i)
            try:
                torch.testing.assert_close(jfn(x), scale(x))
            except thunder_symbolic.RecompileLimitExceeded:
                assert on_limit == "raise" and i >= 8
            if i + 1 in checkpoints(calls):
                gc.collect()
                points.append((i + 1, rss_mb()))
    assert thunder.cache_misses(jfn) == 8, thunder.cache_misses(jfn)
    return points


def jit_and_delete(functions: int) -> list[tuple[int, float]]:
    points = []
    for i in range(functions):

        def f(x, k=i):
            return x.sum(0) * k

        jfn = thunder.jit(f, cache="symbolic values")
        for n in (3, 5):
            x = torch.ones(n, 4)
            torch.testing.assert_close(jfn(x), f(x))
        del jfn, f
        if i + 1 in checkpoints(functions):
            gc.collect()
            points.append((i + 1, rss_mb()))
    return points


def checkpoints(n: int) -> set[int]:
    return {max(1, n // 10), *(n * k // 5 for k in range(1, 6))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000, help="calls with a new width (default 10000)")
    parser.add_argument("--functions", type=int, default=1_000, help="functions jitted and deleted (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if args.calls < 10 or args.functions < 10:
        parser.error("--calls and --functions must be >= 10")
    runs = {
        "past-limit": past_limit(args.calls, "warn"),
        "past-limit-raise": past_limit(args.calls, "raise"),
        "jit-and-delete": jit_and_delete(args.functions),
    }
    if args.json:
        print(json.dumps(runs))
        return
    print(f"thunder-symbolic active: {thunder_symbolic.is_active()}; torch {torch.__version__}")
    print("| run | checkpoints (count: RSS MB) | growth after warm-up |")
    print("| --- | --- | --- |")
    for name, points in runs.items():
        shown = ", ".join(f"{n}: {mb:.1f}" for n, mb in points)
        print(f"| {name} | {shown} | {points[-1][1] - points[0][1]:+.1f} MB |")


if __name__ == "__main__":
    sys.exit(main())
