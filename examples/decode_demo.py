"""A decode loop whose KV cache grows every step, jitted with thunder's two caches side by side.

Shows the point of the patch set: with ``cache="constant values"`` every new length recompiles;
with ``cache="symbolic values"`` one program serves every length, and (patched) a branch on a
length stays correct because the prologue re-checks it.
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


def run(cache: str, steps: int) -> tuple[int, float, bool, list]:
    jfn = thunder.jit(attend, cache=cache)
    k_cache = v_cache = torch.zeros(1, 0, 16)
    correct = True
    start = time.perf_counter()
    for _ in range(steps):
        q, k, v = torch.randn(3, 1, 1, 16).unbind(0)
        expected = attend(q, k_cache, v_cache, k, v)
        out, k_cache, v_cache = jfn(q, k_cache, v_cache, k, v)
        correct &= torch.allclose(out, expected[0], atol=1e-6)
    elapsed = time.perf_counter() - start
    return thunder.cache_misses(jfn), elapsed, correct, thunder_symbolic.recompile_reasons(jfn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"thunder-symbolic active: {thunder_symbolic.is_active()}; {args.steps} decode steps")
    for cache in ("constant values", "symbolic values"):
        compiles, seconds, correct, misses = run(cache, args.steps)
        print(f"  cache={cache!r:18} compiles={compiles:3d}  time={seconds:6.2f}s  matches eager: {correct}")
        if cache == "symbolic values":
            for miss in misses:
                print(f"    recompiled at {miss}")


if __name__ == "__main__":
    main()
