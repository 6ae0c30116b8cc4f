"""A decode loop whose KV cache grows every step, jitted with thunder's two caches side by side.

Shows the point of the patch set: with ``cache="constant values"`` every new length recompiles;
with ``cache="symbolic values"`` one program serves every length, and (patched) a branch on a
length stays correct because the prologue re-checks it. The controls in use: the cache lengths are
declared dynamic up to 4096 (``dynamic_shapes``), the recompile budget warns once when a function keeps
recompiling, and after warm-up ``fail_on_recompile`` turns any further recompile into an error for a
second generation (the serving loop).
"""

import argparse
import time
import warnings

import torch

import thunder
import thunder_symbolic


def attend(q, k_cache, v_cache, k, v):
    k_cache = torch.cat([k_cache, k], dim=1)
    v_cache = torch.cat([v_cache, v], dim=1)
    scores = (q @ k_cache.transpose(-1, -2)) / q.shape[-1] ** 0.5
    out = torch.softmax(scores, dim=-1) @ v_cache
    if k_cache.shape[1] > 8:  # e.g. switch to a windowed path once the cache is long
        out = out * 0.5
    return out, k_cache, v_cache


CACHE_LENGTHS = {name: {1: thunder_symbolic.Dim(max=4096)} for name in ("k_cache", "v_cache")}


def generate(jfn, steps: int) -> bool:
    k_cache = v_cache = torch.zeros(1, 0, 16)
    correct = True
    for _ in range(steps):
        q, k, v = torch.randn(3, 1, 1, 16).unbind(0)
        expected = attend(q, k_cache, v_cache, k, v)
        out, k_cache, v_cache = jfn(q, k_cache, v_cache, k, v)
        correct &= torch.allclose(out, expected[0], atol=1e-6)
    return correct


def run(cache: str, steps: int) -> dict:
    jfn = thunder.jit(attend, cache=cache, dynamic_shapes=CACHE_LENGTHS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", thunder_symbolic.RecompileLimitWarning)
        start = time.perf_counter()
        correct = generate(jfn, steps)
        elapsed = time.perf_counter() - start
    compiles = thunder.cache_misses(jfn)
    thunder_symbolic.fail_on_recompile(jfn)  # warmed up: serve a second generation with no recompile
    correct &= generate(jfn, steps)
    return {
        "compiles": compiles,
        "seconds": elapsed,
        "correct": correct,
        "serving_compiles": thunder.cache_misses(jfn) - compiles,
        "budget": [str(w.message) for w in caught if issubclass(w.category, thunder_symbolic.RecompileLimitWarning)],
        "misses": thunder_symbolic.recompile_reasons(jfn),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"thunder-symbolic active: {thunder_symbolic.is_active()}; {args.steps} decode steps")
    for cache in ("constant values", "symbolic values"):
        r = run(cache, args.steps)
        print(
            f"  cache={cache!r:18} compiles={r['compiles']:3d}  time={r['seconds']:6.2f}s  "
            f"matches eager: {r['correct']}  serving pass after fail_on_recompile: {r['serving_compiles']} compiles"
        )
        for message in r["budget"]:
            print(f"    budget: {message[:160]}...")
        if cache == "symbolic values":
            for miss in r["misses"]:
                print(f"    recompiled at {miss}")


if __name__ == "__main__":
    main()
