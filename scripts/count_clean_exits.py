"""Launch the tensor-parallel benchmarks again and again and count how their ranks end.

A gloo rank can abort at exit ("terminate called without an active exception", exit status -6: see
``thunder/benchmarks/rank_exit.py``); each launch here is a torchrun of the training or the inference benchmark
on 2 or 4 CPU ranks, and the table gives, per benchmark and rank count, the launches that ended with status 0,
those that aborted, and the others.

    python scripts/count_clean_exits.py [--launches 20] [--ranks 2 4] [--benchmarks training inference]

The benchmarks run small (a few steps, one measured iteration): what is counted is how a rank ends, not speed.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = {
    "training": [
        "thunder/benchmarks/benchmark_training.py",
        "--tensor-parallel",
        "--steps",
        "4",
        "--lengths",
        "8",
        "12",
    ],
    "inference": [
        "thunder/benchmarks/benchmark_inference.py",
        "--mode",
        "thunder",
        "--thunder-cache",
        "symbolic values",
        "--num-iterations",
        "1",
        "--output-length",
        "3",
        "--hidden-size",
        "512",  # (8 attention and 4 KV heads: split over 2 or 4 ranks)
    ],
}
ABORTED = "terminate called without an active exception"


def launch(benchmark: str, ranks: int, timeout: float) -> str:
    """One torchrun launch: "clean", "aborted" (a rank's abort at exit) or "failed: <status>"."""
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--nproc-per-node", str(ranks), *BENCHMARKS[benchmark]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "failed: timeout"
    if ABORTED in run.stderr:
        return "aborted"
    return "clean" if run.returncode == 0 else f"failed: {run.returncode}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--launches", type=int, default=20, help="launches per benchmark and rank count (default 20)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--benchmarks", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per launch (default 600)")
    args = parser.parse_args()
    if args.launches < 1 or any(r < 1 for r in args.ranks):
        parser.error("--launches and --ranks must be >= 1")
    print("| benchmark | ranks | launches | clean | aborted at exit | other failures | seconds a launch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    unclean = 0
    for benchmark in args.benchmarks:
        for ranks in args.ranks:
            started = time.monotonic()
            ends = collections.Counter(launch(benchmark, ranks, args.timeout) for _ in range(args.launches))
            others = sum(n for end, n in ends.items() if end.startswith("failed"))
            unclean += args.launches - ends["clean"]
            seconds = (time.monotonic() - started) / args.launches
            print(
                f"| {benchmark} | {ranks} | {args.launches} | {ends['clean']} | {ends['aborted']} | {others} | "
                f"{seconds:.0f} |",
                flush=True,
            )
    return 1 if unclean else 0


if __name__ == "__main__":
    sys.exit(main())
