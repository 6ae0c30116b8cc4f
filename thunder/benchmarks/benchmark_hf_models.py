"""Per-call cost of Hugging Face transformers models' forward across sequence lengths: eager, torch.compile, thunder.

Tiny random configurations of ten architectures (``hf_zoo.py``, no downloads), batch 2, lengths cycling through
5..8 (a new length every call, as prompts of a server): after a warm-up that compiles what each mode compiles
(torch.compile's automatic dynamic shapes, thunder's symbolic values, the latter also with thunder's torch.compile
executor fusing what it can: "thunder fused"), steady-state calls are timed, all modes in one process on the same
inputs, and every mode's logits are checked against eager's.

    python thunder/benchmarks/benchmark_hf_models.py [--calls 200] [--only llama,gpt2] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings

import thunder
import torch
from hf_zoo import MODELS, inputs, model

import thunder_symbolic

MODES = ("eager", "torch.compile", "thunder symbolic values", "thunder fused")
LENGTHS = (5, 6, 7, 8)


def forward_options(name: str) -> dict:
    return {} if name in ("vit", "bert") else {"use_cache": False}


def compiled(mode: str, module: torch.nn.Module):
    if mode == "eager":
        return module
    if mode == "torch.compile":
        return torch.compile(module)
    if mode == "thunder fused":  # (symbolic values; elementwise and reduction chains fused by Inductor)
        from thunder.executors.torch_compile import torch_compile_ex

        executors = [torch_compile_ex, *thunder.get_default_executors()]
        return thunder.jit(module, cache="symbolic values", executors=executors)
    return thunder.jit(module, cache=mode.removeprefix("thunder "))


def compiles(mode: str, fn) -> int | None:
    """thunder's compiles, or the graphs Dynamo compiled since its last reset (None for eager)."""
    if mode.startswith("thunder"):
        return thunder.cache_misses(fn)
    return torch._dynamo.utils.counters["stats"]["unique_graphs"] if mode == "torch.compile" else None


def measure_model(name: str, calls: int) -> dict:
    eager = model(name).eval()
    torch.manual_seed(1)
    cycle = [inputs(name, length) for length in LENGTHS]
    options = forward_options(name)
    row = {}
    with torch.no_grad():
        expected = [eager(**kwargs, **options).logits for kwargs in cycle]
        for mode in MODES:
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            fn = compiled(mode, eager)
            started = time.perf_counter()
            for kwargs, logits in zip(cycle, expected):  # (warm-up: compiles; every length checked)
                torch.testing.assert_close(fn(**kwargs, **options).logits, logits)
            warm_up_s = time.perf_counter() - started
            samples = []
            for i in range(calls):
                kwargs = cycle[i % len(cycle)]
                start = time.perf_counter_ns()
                fn(**kwargs, **options)
                samples.append((time.perf_counter_ns() - start) / 1e3)
            q1, median, q3 = statistics.quantiles(samples, n=4)
            row[mode] = {"median_us": median, "iqr_us": q3 - q1, "warm_up_s": warm_up_s, "compiles": compiles(mode, fn)}
    return row


def print_table(results: dict) -> None:
    print(f"{'model':10}" + "".join(f"{m:>26}" for m in MODES) + f"{'fused / torch.compile':>24}")
    for name, row in results.items():
        cells = "".join(f"{row[m]['median_us']:>14.0f} ±{row[m]['iqr_us']:<10.0f}" for m in MODES)
        ratio = row["thunder fused"]["median_us"] / row["torch.compile"]["median_us"]
        print(f"{name:10}{cells}{ratio:>23.2f}x")
    means = {m: math.exp(statistics.fmean(math.log(r[m]["median_us"]) for r in results.values())) for m in MODES}
    print(f"{'geo. mean':10}" + "".join(f"{means[m]:>14.0f}{'':12}" for m in MODES))
    for mode in MODES[1:]:
        counts = ", ".join(f"{name} {row[mode]['compiles']}" for name, row in results.items())
        print(f"{mode} compiles over {len(LENGTHS)} lengths: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--only", default="", help=f"comma-separated models among {', '.join(MODELS)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()] or list(MODELS)
    unknown = [name for name in only if name not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}: choose from {', '.join(MODELS)}")
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    results = {name: measure_model(name, args.calls) for name in only}
    if args.json:
        print(json.dumps({"thunder_symbolic_active": thunder_symbolic.is_active(), "results": results}, indent=2))
    else:
        print(f"thunder-symbolic active: {thunder_symbolic.is_active()}; median µs per forward ± IQR, batch 2\n")
        print_table(results)


if __name__ == "__main__":
    main()
