"""Smoke test of the training benchmark: both caches match eager; symbolic values compile once, on one
process and tensor-parallel over 2 ranks."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def _tensor_parallel_run(ranks: int, env: dict[str, str]) -> dict:
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), str(BENCHMARK)]
    args += ["--tensor-parallel", "--lengths", "5", "8", "6", "--steps", "4", "--batch", "2", "--json"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, env=os.environ | env, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.distributed
@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda", marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices for nccl")
        ),
    ],
)
def test_tensor_parallel_training_benchmark_compiles_once_in_grad_mode(device):
    # The sharded MLP and head train in grad mode (no torch.no_grad): 0.2.6 had no DTensor grad rules.
    env = {"OMP_NUM_THREADS": "1"} | ({} if device == "cuda" else {"CUDA_VISIBLE_DEVICES": ""})
    report = _tensor_parallel_run(2, env)
    assert report["tensor_parallel"] == {"ranks": 2, "device": device}
    assert report["constant values"]["compiles"] == 3
    assert report["symbolic values"]["compiles"] == 1
    for cache in ("constant values", "symbolic values"):
        assert report[cache]["loss_diff"] < 1e-5 and report[cache]["grad_diff"] < 1e-5, report[cache]


def test_tensor_parallel_training_benchmark_needs_torchrun():
    args = [sys.executable, str(BENCHMARK), "--tensor-parallel"]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "runs under torchrun" in result.stderr
