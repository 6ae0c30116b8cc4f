"""CPU smoke test of the inference benchmark: 2 ranks over gloo, a growing KV cache, both thunder caches,
a dense and an MoE layer (tensor-parallel grouped-matmul experts)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from thunder_symbolic.testing import run_python, run_torchrun

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_inference.py"


def run_benchmark(tmp_path, *flags, nproc=2):
    code = f"""
    import sys
    sys.argv = ["benchmark_inference.py", *{list(flags)!r}, "--save-results", "--output-dir", {str(tmp_path)!r}]
    sys.path.insert(0, {str(BENCHMARK.parent)!r})
    import benchmark_inference
    sys.exit(benchmark_inference.main())
    """
    result = run_torchrun(code, nproc=nproc, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    (report,) = tmp_path.glob("inference_*.json")
    return json.loads(report.read_text()), result


@pytest.mark.distributed
def test_symbolic_values_never_recompile_in_later_decode(tmp_path):
    report, result = run_benchmark(
        tmp_path, "--mode", "thunder", "--compare-cache", "--num-layers", "2", "--output-length", "5",
        "--num-iterations", "1", "--warmup-iterations", "0",
    )
    runs = {run["thunder_cache"]: run for run in report["runs"]}
    assert report["config"]["world_size"] == 2 and report["config"]["kv_cache"] == "dynamic"
    assert runs["symbolic values"]["compile"]["recompiles_later_decode"] == 0
    assert runs["constant values"]["compile"]["recompiles_later_decode"] > 0
    assert all(run["verify"]["matches_eager"] for run in runs.values())
    assert all(run["grouped_expert_moe_blocks"] == 1 for run in runs.values())  # layer 1 of 2 is MoE
    assert "recompiles excluding initial" in result.stdout


def test_unsupported_combination_fails_with_a_clear_message(tmp_path):
    code = f"""
    import sys
    sys.path.insert(0, {str(BENCHMARK.parent)!r})
    import benchmark_inference
    sys.exit(benchmark_inference.main(["--mode", "thunderjit", "--kv-cache", "dynamic"]))
    """
    result = run_python(code)
    assert result.returncode != 0
    assert "--mode thunderjit cannot run transformers' DynamicCache" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "mode"),
    [
        ([], "eager"),
        (["--thunder-cache", "symbolic values"], "thunder"),
        (["--compare-cache"], "thunder"),
        (["--mode", "thunderjit", "--thunder-cache", "symbolic values"], "thunderjit"),
    ],
)
def test_a_thunder_option_without_a_mode_runs_thunder(flags, mode):
    assert _benchmark_module().parse_args(flags).mode == mode


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mode", "eager", "--thunder-cache", "symbolic values"], "--thunder-cache applies to --mode thunder"),
        (["--mode", "inductor", "--compare-cache"], "--compare-cache applies to --mode thunder"),
        (["--input-length", "0"], "--input-length: must be at least 1, got 0"),
        (["--output-length", "1"], "--output-length: must be at least 2, got 1"),
        (["--batch-size", "-3"], "--batch-size: must be at least 1, got -3"),
        (["--num-iterations", "many"], "--num-iterations: expected an int, got 'many'"),
    ],
)
def test_invalid_options_are_argparse_errors(flags, message, capsys):
    with pytest.raises(SystemExit):
        _benchmark_module().parse_args(flags)
    assert message in capsys.readouterr().err


def _benchmark_module():
    if "benchmark_inference" not in sys.modules:  # its dataclasses look their module up there
        spec = importlib.util.spec_from_file_location("benchmark_inference", BENCHMARK)
        sys.modules["benchmark_inference"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["benchmark_inference"]
