"""CPU smoke test of the inference benchmark: 2 ranks over gloo, a growing KV cache, both thunder caches,
a dense and an MoE layer (tensor-parallel grouped-matmul experts)."""

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from thunder_symbolic.testing import run_python, run_torchrun

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_inference.py"
CONSTANT, SYMBOLIC = "constant values", "symbolic values"
_TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def run_benchmark(tmp_path, *flags, nproc=2, env=None):
    code = f"""
    import sys
    sys.argv = ["benchmark_inference.py", *{list(flags)!r}, "--save-results", "--output-dir", {str(tmp_path)!r}]
    sys.path.insert(0, {str(BENCHMARK.parent)!r})
    import benchmark_inference
    sys.exit(benchmark_inference.main())
    """
    result = run_torchrun(code, nproc=nproc, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    (report,) = tmp_path.glob("inference_*.json")
    return json.loads(report.read_text()), result


@pytest.mark.distributed
def test_symbolic_values_never_recompile_in_later_decode(tmp_path):
    report, result = run_benchmark(
        tmp_path,
        "--compare-modes",
        "eager,thunder",
        "--num-layers",
        "2",
        "--output-length",
        "5",
        "--num-iterations",
        "1",
        "--warmup-iterations",
        "0",
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},  # empty: Inductor compiles (misses)
    )
    runs = {run["thunder_cache"]: run for run in report["runs"] if run["mode"] == "thunder"}
    assert report["config"]["world_size"] == 2 and report["config"]["kv_cache"] == "dynamic"
    assert [run["mode"] for run in report["runs"]] == ["eager", "thunder", "thunder"]
    assert runs[SYMBOLIC]["compile"]["recompiles_later_decode"] == 0
    assert runs[CONSTANT]["compile"]["recompiles_later_decode"] > 0
    assert all(run["verify"]["matches_eager"] for run in report["runs"])
    assert all(run["grouped_expert_moe_blocks"] == 1 for run in runs.values())  # layer 1 of 2 is MoE
    assert "recompiles excluding initial" in result.stdout
    # The compilers' once-per-process start-up is paid before any mode is timed, so that a mode's first token does
    # not depend on the order of the modes: Inductor's (thunderfx leaves regions to it), Dynamo's first capture of
    # the model, and a first compile per mode.
    start_up = report["start_up"]
    assert start_up["inductor_import_s"] > 0 and start_up["dynamo_capture_s"] > 0
    assert list(start_up["first_compile_s"]) == [f"thunder ({CONSTANT})", f"thunder ({SYMBOLIC})"]
    assert "paid once before any mode is timed" in result.stdout and "Dynamo's first capture" in result.stdout
    # thunder's share of the first token (its first compiling step): tracing, then the transforms for execution.
    phases = runs[SYMBOLIC]["compile"]["first_compile_thunder"]
    assert 0 < phases["thunder_tracing_s"] and 0 < phases["thunder_transforms_s"]
    assert phases["thunder_tracing_s"] + phases["thunder_transforms_s"] < runs[SYMBOLIC]["compile"]["first_token_s"]
    assert "thunder's tracing" in result.stdout
    # Whether Inductor's on-disk cache served a mode's graphs: the first thunder run finds it empty and compiles
    # (a graph it compiled twice is a hit the second time).
    assert report["runs"][1]["compile"]["inductor_cache_misses"] > 0
    assert "Inductor's FX-graph cache: " in result.stdout
    # and how many of thunderfx's verdicts came from its cache across processes, or went into it
    verdicts = [
        run["compile"]["thunderfx_verdicts_read"] + run["compile"]["thunderfx_verdicts_kept"] for run in report["runs"]
    ]
    assert verdicts[0] == 0 and verdicts[1] > 0  # eager has none; the first thunderfx run reads or keeps its kinds
    assert "thunderfx's verdict cache: " in result.stdout
    # One table: each run's TBOT against eager's, the thunder regions a decode step runs, why graphs split.
    rows = {row["run"]: row for row in report["comparison"]}
    assert rows["eager"]["tbot_vs_eager"] == 1.0 and rows["eager"]["tbot_vs_inductor"] is None
    symbolic = rows["thunder (symbolic values)"]
    assert symbolic["tbot_vs_eager"] == symbolic["tbot_ms"] / rows["eager"]["tbot_ms"]
    # the main thread's CPU time per token: part of the wall time (waits for the other rank are not in it)
    assert all(0 < row["tbot_cpu_ms"] <= row["tbot_ms"] for row in rows.values())
    # and the slowest rank's (each rank measures its own: rank 0's is one of them)
    assert all(row["tbot_cpu_ms"] <= row["tbot_cpu_slowest_rank_ms"] for row in rows.values())
    assert "CPU ms" in result.stdout and "the slowest rank's" in result.stdout
    # and the whole process's, gloo's communication threads included (thunder's small sums go through shared memory,
    # in the main thread)
    assert all(row["tbot_cpu_ms"] <= row["tbot_process_cpu_ms"] for row in rows.values())
    assert "communication threads included" in result.stdout and " process " in result.stdout
    assert 0 < symbolic["thunder_regions_per_decode_step"] <= runs[SYMBOLIC]["compile"]["thunder_compiled_functions"]
    # the ranks share the host: thunder's small sums over them go through shared memory. From torch 2.12 thunderfx
    # leaves every DTensor operation to PyTorch (Dynamo passes the mesh as a script object): thunder makes no sums.
    sums = "shared memory" if _TORCH < (2, 12) else None
    assert all(run["compile"]["small_sums_over_ranks"] == sums for run in runs.values())
    assert ("small sums over the ranks: shared memory" in result.stdout) == (sums is not None)
    assert runs[SYMBOLIC]["compile"]["split_reasons"] and "graph splits:" in result.stdout
    assert "-- comparison" in result.stdout and "x eager" in result.stdout
    # Where a decode step's time goes: thunder's regions (their prologues among it) and the rest.
    profile = runs[SYMBOLIC]["compile"]["decode_step_profile"]
    assert profile["steps"] > 0 and 0 < profile["thunder_prologues_ms"] < profile["thunder_regions_ms"]
    assert profile["thunder_regions_ms"] + profile["outside_thunder_ms"] == pytest.approx(profile["step_ms"])
    assert profile["top_regions"] and " ops: " in profile["top_regions"][0]["region"]
    assert "costliest regions per step:" in result.stdout
    assert next(run for run in report["runs"] if run["mode"] == "eager")["compile"]["decode_step_profile"] is None


@pytest.mark.distributed
@pytest.mark.parametrize("nproc", [1, 2])
def test_tensor_parallel_ranks_end_without_python_finalization(tmp_path, nproc):
    """A rank ends once its report is out, without Python's finalization: gloo's threads releasing a collective's
    tensors during it aborted ranks on torch 2.14 (``rank_exit``), and a lone torchrun rank on torch 2.10 (its
    group is gloo's too). An exit handler shows whether it ran."""
    code = f"""
    import atexit
    import sys
    atexit.register(print, "python finalized", flush=True)
    sys.argv = ["benchmark_inference.py", "--mode", "eager", "--num-layers", "2", "--output-length", "3",
                "--num-iterations", "1", "--warmup-iterations", "0", "--save-results", "--output-dir", {str(tmp_path)!r}]
    sys.path.insert(0, {str(BENCHMARK.parent)!r})
    import benchmark_inference
    sys.exit(benchmark_inference.main())
    """
    result = run_torchrun(code, nproc=nproc, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "-- eager" in result.stdout and len(list(tmp_path.glob("inference_*.json"))) == 1
    assert "python finalized" not in result.stdout


def test_thunder_jit_on_one_rank_with_a_static_cache(tmp_path):
    """thunder.jit of the whole model (no Dynamo, so no Inductor or Dynamo start-up), logits equal to eager's: its
    prologue checks transformers' registry of classes, whose keys print in double quotes."""
    report, result = run_benchmark(
        tmp_path,
        "--mode",
        "thunderjit",
        "--kv-cache",
        "static",
        "--thunder-cache",
        SYMBOLIC,
        "--num-layers",
        "1",
        "--output-length",
        "2",
        "--num-iterations",
        "1",
        "--warmup-iterations",
        "0",
        nproc=1,
    )
    start_up = report["start_up"]
    assert list(start_up) == ["first_compile_s"] and list(start_up["first_compile_s"]) == [f"thunderjit ({SYMBOLIC})"]
    assert [run["verify"]["matches_eager"] for run in report["runs"]] == [True]


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
        (["--enable-torch-compile-executor"], "thunder"),
        (["--mode", "thunderjit", "--thunder-cache", "symbolic values"], "thunderjit"),
    ],
)
def test_a_thunder_option_without_a_mode_runs_thunder(flags, mode):
    assert _benchmark_module().parse_args(flags).mode == mode


@pytest.mark.parametrize(
    ("flags", "runs"),
    [
        ([], [("eager", None)]),
        (["--mode", "thunder", "--compare-cache"], [("thunder", CONSTANT), ("thunder", SYMBOLIC)]),
        (
            ["--compare-modes", "eager,inductor,thunder"],
            [("eager", None), ("inductor", None), ("thunder", CONSTANT), ("thunder", SYMBOLIC)],
        ),
        (["--compare-modes", "thunder, eager", "--thunder-cache", SYMBOLIC], [("thunder", SYMBOLIC), ("eager", None)]),
    ],
)
def test_runs_of_one_launch(flags, runs):
    assert _benchmark_module().parse_args(flags).runs == runs


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mode", "eager", "--thunder-cache", "symbolic values"], "--thunder-cache applies to --mode thunder"),
        (["--mode", "inductor", "--compare-cache"], "--compare-cache applies to --mode thunder"),
        (["--input-length", "0"], "--input-length: must be at least 1, got 0"),
        (["--output-length", "1"], "--output-length: must be at least 2, got 1"),
        (["--batch-size", "-3"], "--batch-size: must be at least 1, got -3"),
        (["--num-iterations", "many"], "--num-iterations: expected an int, got 'many'"),
        (["--compare-modes", "eager,jax"], "unknown mode 'jax': choose from eager, inductor, thunder, thunderjit"),
        (["--compare-modes", "eager,eager"], "a mode is named twice in 'eager,eager'"),
        (["--compare-modes", "eager", "--mode", "thunder"], "do not also give --mode"),
        (["--compare-modes", "thunder", "--compare-cache"], "--compare-modes runs every cache option"),
        (["--compare-modes", "eager,inductor", "--thunder-cache", SYMBOLIC], "--compare-modes names none"),
        (["--mode", "inductor", "--enable-torch-compile-executor"], "applies to --mode thunder"),
        (["--compare-modes", "eager", "--enable-torch-compile-executor"], "--compare-modes names none"),
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


def test_split_reasons_count_each_node_once():
    """thunderfx records a node's reason each time split_module asks for its partition: twice in a graph with
    grad-mode or autocast nodes (the benchmark's printed 48 vmap splits for 24)."""
    from types import SimpleNamespace

    from thunder.dynamo.utils import SplitReason, SplitReasonType

    def reason(node):
        return SplitReason(SplitReasonType.MISSING_OP_SUPPORT, info=f"node with name: {node} and target: vmap")

    graph = SimpleNamespace(split_reasons=[reason("a"), reason("b"), reason("a"), reason("b")])
    compiled = SimpleNamespace(_backend=SimpleNamespace(subgraph_infos=[graph, graph]))
    assert _benchmark_module().split_reasons(compiled) == {"MISSING_OP_SUPPORT: target: vmap": 4}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_background_load_keeps_cores_busy_while_the_block_runs_and_leaves_no_process():
    sys.path.insert(0, str(BENCHMARK.parent))
    from background_load import busy_processes

    with busy_processes(2) as started:
        pids = [p.pid for p in started]
        deadline = time.monotonic() + 60  # (on a loaded machine they share the cores with everything else)
        while not all(_cpu_seconds(pid) >= 0.3 for pid in pids):  # (more than Python's start-up takes)
            assert time.monotonic() < deadline, "a busy process is not using the CPU"
            time.sleep(0.05)
        assert all(p.poll() is None for p in started)
    assert all(p.returncode is not None for p in started)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        with busy_processes(-1):
            pass


def test_background_load_ends_with_the_process_that_started_it():
    """A rank that ends without finalization (or crashes) leaves no spinning process behind."""
    code = f"""
    import os, sys
    sys.path.insert(0, {str(BENCHMARK.parent)!r})
    from background_load import busy_processes
    load = busy_processes(1)
    (process,) = load.__enter__()
    print(process.pid, flush=True)
    os._exit(0)
    """
    result = run_python(code)
    pid = int(result.stdout.split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the busy process outlived its parent"
        time.sleep(0.05)
