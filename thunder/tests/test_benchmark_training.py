"""Smoke test of the training benchmark: both caches match eager; symbolic values compile once."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_training.py"


def test_training_benchmark_reports_one_compile_under_symbolic_values():
    args = [sys.executable, str(BENCHMARK), "--lengths", "5", "8", "6", "--steps", "4", "--batch", "2", "--json"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["constant values"]["compiles"] == 3
    assert report["symbolic values"]["compiles"] == 1
    for cache in ("constant values", "symbolic values"):
        assert report[cache]["loss_diff"] < 1e-5 and report[cache]["grad_diff"] < 1e-5, report[cache]


def test_training_benchmark_rejects_bad_arguments():
    result = subprocess.run([sys.executable, str(BENCHMARK), "--lengths", "1"], capture_output=True, text=True)
    assert result.returncode == 2 and "--lengths must be >= 2" in result.stderr
