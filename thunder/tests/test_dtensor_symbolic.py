"""DTensor and tensor parallelism under symbolic values: the programs of dtensor_programs.py on 1 and 2 ranks.

0.2.6 failed `DTensor.from_local` under symbolic values (a proxy without history), once that was
tolerated returned the global size of the *first* call for every later one (8 where 16 is right), and
recompiled every DTensor program for every sequence length (its DTensor meta functions pin the sizes
they run on). Here every output equals eager PyTorch's (the unsharded module's, for tensor-parallel
modules) over four sequence lengths, and the shape-polymorphic programs compile once.

In grad mode (no ``torch.no_grad``, the default for a module call) 0.2.6 failed on the first DTensor
operation ("Failed to find a gradient transform ... dtensor_from_local"). Here every program also runs
as a training step would: outputs and the gradients of every argument and parameter (as full tensors)
equal PyTorch's DTensor autograd's, with the same compile counts.
"""

import json
from pathlib import Path

import pytest
import torch
from dtensor_programs import CASES, LENGTHS

from thunder_symbolic.distributed.shared_sums import RING
from thunder_symbolic.testing import run_torchrun

PROGRAMS = Path(__file__).with_name("dtensor_programs.py")
BENCHMARKS = Path(__file__).parents[1] / "benchmarks"

_TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])

# Programs that compile more than once, how often, and why: everything else must compile exactly once
# ("grad:<case>" for grad mode only).
COMPILES = {
    "shard_uneven": (len(LENGTHS), "sharding a dim splits it unevenly: no shape rule, the sizes are pinned"),
    "placements_change": (2, "a Shard(0) and a Replicate argument of one global shape are two programs"),
    "grad:partial_sums": (len(LENGTHS), "exp of a Partial DTensor, differentiated: its sizes are pinned"),
    "grad:partial_products": (
        len(LENGTHS),
        "a product of Partial DTensors, differentiated: the backward multiplies DTensors of different "
        "placements, which has no shape rule (its sizes are pinned)",
    ),
}

# On CUDA, in grad mode, thunder's sdpa executor picks the attention kernel whose saved tensors the backward reads
# by the concrete sizes (thunder_symbolic.patches.executors_sdpaex): one program per length (Dynamo's first graph
# is static, so thunderfx's dynamic one sees one length fewer). Seen on an H200.
CUDA_COMPILES = {
    "grad:attention_tensor_parallel": (len(LENGTHS), "the sdpa executor's kernel choice pins the lengths"),
    "grad:attention_thunderfx": (len(LENGTHS) - 1, "the sdpa executor's kernel choice pins the lengths"),
}

# The DTensor operations each program (without grad) still runs through DTensor's dispatch; every other
# one runs on local tensors (thunder_symbolic.distributed.dtensor_local). A DTensor the program returns, or hands to
# one of these, is made by DTensor (one whose shape is read is not: the sizes are computed from the local tensor's,
# thunder_symbolic.passes.size_reads).
THROUGH_DTENSOR = {
    "partial_sums": {"dtensor_from_local", "dtensor_exp"},  # DTensor sums the partials before exp
    "partial_products": {"dtensor_from_local", "dtensor_mul"},  # and one factor of a product of partials
    "redistribute_to_replicate": {"dtensor_from_local", "dtensor_redistribute"},  # Shard to Replicate gathers
    "full_tensor": {"dtensor_from_local", "dtensor_redistribute"},
    "reshape_replicated": {"dtensor_from_local", "dtensor_reshape_prim"},
    "grouped_mm_sharded": {"dtensor_from_local", "dtensor_grouped_mm_prim"},
    "shard_uneven": {"dtensor_from_local", "dtensor_redistribute"},  # Replicate to Shard splits
    # the row-parallel linear's bias: DTensor adds it to the partial sums its own way
    "mlp_tensor_parallel": {"dtensor_from_local", "dtensor_linear_prim"},
    "moe_tensor_parallel": {"dtensor_from_local", "dtensor_linear_prim"},
    "mlp_torchcompile": {"dtensor_from_local", "dtensor_linear_prim"},
    # the linear layers are left to PyTorch: DTensors pass between thunder programs (from torch 2.12 every
    # DTensor operation is, as Dynamo passes the mesh as a script object)
    **dict.fromkeys(
        ("mlp_thunderfx", "attention_thunderfx", "moe_thunderfx"),
        set() if _TORCH >= (2, 12) else {"dtensor_from_local"},
    ),
}

# torch 2.14's torch.compile fails on these tensor-parallel modules in grad mode (BackendCompilerFailed:
# RecursionError in make_fx's lazy proxies), and thunderfx compiles the graphs it leaves to PyTorch
# (the DTensor redistributions) with it. torch.compile(module) fails the same way there.
INDUCTOR_FAILS_IN_GRAD_MODE = {"mlp_thunderfx", "attention_thunderfx"} if _TORCH >= (2, 14) else set()

LAUNCHES = {
    "cpu-1": ("cpu", 1),
    "cpu-2": ("cpu", 2),
    "cuda-1": ("cuda", 1),
    "cuda-2": ("cuda", 2),
}


def _launch_param(launch):
    device, ranks = LAUNCHES[launch]
    if device == "cuda" and torch.cuda.device_count() < ranks:
        return pytest.param(launch, marks=pytest.mark.skip(reason=f"needs {ranks} CUDA device(s) for nccl"))
    return launch


class Reports(dict):
    """The cases' reports of one launch, by case, and the device it ran on."""

    def __init__(self, device: str, reports: dict):
        super().__init__(reports)
        self.device = device


@pytest.fixture(scope="module", params=[_launch_param(launch) for launch in LAUNCHES])
def results(request):
    device, ranks = LAUNCHES[request.param]
    env = {"DEVICE": device, "PYTHONPATH": str(BENCHMARKS)}  # the MoE case uses the benchmark's layers
    run = run_torchrun(PROGRAMS.read_text(), nproc=ranks, env=env, timeout=600)
    reported = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            reported[entry["case"]] = entry
    if run.returncode != 0 and not reported:
        pytest.fail(f"torchrun failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return Reports(device, reported)


def _check(results, case, name):
    assert case in results, f"{case} did not report (the run stopped before it)"
    entry = results[case]
    assert entry["ok"], entry["error"]
    counts = COMPILES | (CUDA_COMPILES if results.device == "cuda" else {})
    expected = counts.get(case, counts.get(name, (1, "shape-polymorphic")))[0]
    assert entry["compiles"] == expected, f"{case}: {entry['compiles']} compiles, expected {expected}"


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(CASES))
def test_dtensor_program_matches_eager(results, case):
    _check(results, case, case)


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(CASES))
def test_dtensor_operations_run_on_local_tensors(results, case):
    _check(results, case, case)
    assert set(results[case]["dtensor_operations"]) == THROUGH_DTENSOR.get(case, set())


@pytest.mark.distributed
@pytest.mark.skipif(_TORCH >= (2, 12), reason="from torch 2.12 Dynamo keeps DTensor methods as method calls")
@pytest.mark.parametrize("case", [case for case in CASES if case.endswith("_thunderfx")])
def test_thunderfx_keeps_redistribute_in_thunder(results, case):
    """The MoE experts redistribute with positional mesh and placements (0.2.6 split the graph there)."""
    _check(results, case, case)
    assert not [reason for reason in results[case]["split_reasons"] if "redistribute" in reason]


@pytest.mark.distributed
@pytest.mark.parametrize("case", [case for case in CASES if case.endswith("_thunderfx")])
def test_thunderfx_makes_proxies_of_dtensors_with_symbolic_sizes(results, case):
    """From the second sequence length Dynamo's graph holds DTensors of symbolic sizes: thunderfx's splitter
    failed to make their proxies ('unhashable type: non-nested SymInt') and left each of their operations to
    PyTorch."""
    _check(results, case, case)
    assert not [reason for reason in results[case]["split_reasons"] if "creating proxy" in reason]


@pytest.mark.distributed
@pytest.mark.parametrize("case", [case for case in CASES if case.endswith("_torchcompile")])
def test_torch_compile_executor_fuses_the_local_operations(results, case):
    """The torch.compile executor leaves DTensor operations alone (it failed on them) and fuses the DTensor
    local executor's: the column-parallel linear and the relu in one region."""
    _check(results, case, case)
    fused = [name for fusion in results[case]["fusions"] for name in fusion]
    assert "local_linear" in fused and not [name for name in fused if name.startswith("dtensor_")]


_COMMUNICATION = {"local_all_reduce", "local_wait", "local_all_reduce_together", "local_wait_together"}


def _order(results, case, *computations):
    """The case's communication and the given computations, in the order its program runs them (an in-place
    sum named as the other)."""
    names = _COMMUNICATION | set(computations)
    return [name.rstrip("_") for name in results[case]["operations"] if name.rstrip("_") in names]


@pytest.mark.distributed
def test_a_sum_over_the_ranks_is_waited_for_where_it_is_read(results):
    """The sum is started, the product that does not need it computed, and only then is it waited for: the
    communication overlaps with that work (it was waited for at once; before the waits were placed after
    every fusion pass, the default torchcompile_xentropy executor's partition moved them back up)."""
    _check(results, "overlapped_sum", "overlapped_sum")
    assert _order(results, "overlapped_sum", "matmul") == ["local_all_reduce", "matmul", "local_wait"]


@pytest.mark.distributed
def test_sums_started_before_either_is_read_are_one_collective(results):
    """A collective's latency, not its bytes, is a small sum's cost: the two sums are sent as one (there were
    two collectives), and each output still equals eager's."""
    _check(results, "sums_together", "sums_together")
    order = _order(results, "sums_together", "local_linear")
    assert order == ["local_linear", "local_linear", "local_all_reduce_together", "local_wait_together"]


@pytest.mark.distributed
def test_a_sum_computed_without_an_earlier_sum_joins_it(results):
    """The first sum is read before the second product is computed (a MoE's routed experts, then its shared
    expert): the second product does not need the first sum, so it is computed and its sum started before
    the first is waited for, and the two are one collective (they were two)."""
    _check(results, "sum_read_first", "sum_read_first")
    order = _order(results, "sum_read_first", "local_linear", "flip")
    assert order == ["local_linear", "local_linear", "local_all_reduce_together", "local_wait_together", "flip"]


@pytest.mark.distributed
def test_a_sum_computed_from_an_earlier_sum_waits_for_it(results):
    """Where the second product reads the first sum, it is computed after that sum is waited for: two
    collectives, in the program's order."""
    _check(results, "sum_feeds_the_next", "sum_feeds_the_next")
    order = _order(results, "sum_feeds_the_next", "local_linear")
    assert order == ["local_linear", "local_all_reduce", "local_wait", "local_linear", "local_all_reduce", "local_wait"]


@pytest.mark.distributed
def test_sums_larger_than_a_bucket_stay_two_collectives(results):
    """Larger sums cost their bytes: the first is started at once, the second product computed while it is
    communicated, then the second sum started, and each is waited for where it is read."""
    _check(results, "large_sums", "large_sums")
    order = _order(results, "large_sums", "local_linear")
    assert order == ["local_linear", "local_all_reduce", "local_linear", "local_all_reduce", "local_wait", "local_wait"]


def _grad_param(case):
    if case in INDUCTOR_FAILS_IN_GRAD_MODE:
        return pytest.param(case, marks=pytest.mark.xfail(reason="torch.compile fails in grad mode", strict=True))
    return case


@pytest.mark.distributed
@pytest.mark.parametrize("case", [_grad_param(case) for case in CASES])
def test_dtensor_program_gradients_match_eager(results, case):
    _check(results, f"grad:{case}", case)


def test_the_torch_compile_executor_fuses_what_the_dtensor_local_executor_writes():
    """Fusion passes run in the executors' order: the torch.compile executor must see the local operations."""
    import thunder
    from thunder_symbolic.distributed.dtensor_local import with_torch_compile_executor

    names = [ex.name for ex in with_torch_compile_executor(thunder.get_default_executors())]
    assert names.index("torchcompile") == names.index("dtensor_local") + 1


# Sums over 2 gloo ranks through the DTensor local executor's operators, against c10d's all-reduce.
# SHARED_ON names the ranks whose environment allows shared memory (THUNDER_SYMBOLIC_SHARED_SUMS).
SUMS = """
import json, os, sys, time, torch, torch.distributed as dist
from datetime import timedelta

dist.init_process_group("gloo")
rank, group = dist.get_rank(), dist.group.WORLD.group_name
if str(rank) not in os.environ["SHARED_ON"].split(","):
    os.environ["THUNDER_SYMBOLIC_SHARED_SUMS"] = "0"
import thunder_symbolic.distributed.dtensor_local as dl
from thunder_symbolic.distributed import shared_sums
from thunder_symbolic.distributed.shared_sums import RING, SharedSums

torch.manual_seed(rank)
lines = []  # written at once at the end: the ranks share stdout


def report(**entry):
    lines.append(json.dumps({"rank": rank, "pending": len(dl._started), **entry}))


def all_reduce(t, op="sum"):
    out = t.clone()
    dist.all_reduce(out, op=getattr(dist.ReduceOp, op.upper()))
    return out


def path(started):
    entry = dl._started.get(id(started))
    return "all_reduce" if entry is None else "shared" if isinstance(entry[1], SharedSums) else "gather"


def case(name, t, op="sum", in_place=True):
    expected, before = all_reduce(t, op), t.clone()
    started = (dl._all_reduce_in_place if in_place else dl._all_reduce)(t, op, group)
    how = path(started)
    result = dl._wait(started)
    report(case=name, path=how, equal=torch.equal(result, expected), in_place=result.data_ptr() == t.data_ptr(),
           input_kept=torch.equal(t, before))


case("decode_step", torch.randn(1, 1, 256).bfloat16())
case("prefill_out_of_place", torch.randn(1, 16, 256).bfloat16(), in_place=False)
case("strided", torch.randn(16, 8).t())
case("at_gather_bytes", torch.randn(dl.GATHER_BYTES // 4).bfloat16())  # 2 ranks x 2 bytes an element
case("above_gather_bytes", torch.randn(dl.GATHER_BYTES // 4 + 1).bfloat16())
case("max", torch.randn(8), op="max")
case("integers", torch.randint(0, 100, (8,)))
a, b = torch.randn(2, 4).bfloat16(), torch.randn(3).bfloat16()
sums = dl._wait_together(dl._all_reduce_together((a, b), "sum", group))
report(case="together", equal=[torch.equal(s, all_reduce(t)) for s, t in zip(sums, (a, b))])

# More sums in flight than the ring has entries, over two groups interleaved, with operands of several sizes
# and dtypes: RING + 2 sums finished newest first, then 2 * RING finished oldest first, then one sum held while
# 3 * RING later ones are started and finished. Each equals the all-reduce.
other = dist.new_group([0, 1])
operands = [torch.randn(5 + i, 3).to(torch.float16 if i % 2 else torch.float32) for i in range(6 * RING + 3)]
expected = [all_reduce(t) for t in operands]
groups = [(group, other.group_name)[i % 2] for i in range(len(operands))]
started = [dl._all_reduce(t, "sum", g) for t, g in zip(operands[:RING + 2], groups)]
paths = sorted({path(s) for s in started})
results = [dl._wait(s) for s in reversed(started)][::-1]
started = [dl._all_reduce(t, "sum", g) for t, g in zip(operands[RING + 2:3 * RING + 2], groups[RING + 2:])]
results += [dl._wait(s) for s in started]
held = dl._all_reduce(operands[3 * RING + 2], "sum", group)
results += [None]
for t in operands[3 * RING + 3:]:
    results.append(dl._wait(dl._all_reduce(t, "sum", group)))
results[3 * RING + 2] = dl._wait(held)
report(case="in_flight", paths=paths, equal=[torch.equal(r, e) for r, e in zip(results, expected)])

# A rank that does not take part: the other one's wait raises within the group's timeout.
late = dist.new_group([0, 1], timeout=timedelta(seconds=2))
shared = shared_sums.for_group(late, 64)
error = None
if rank == 0 and shared is not None:
    t0 = time.monotonic()
    try:
        shared.finish(shared.start(torch.ones(4), torch.empty(4)))
    except RuntimeError as e:
        error = (str(e), round(time.monotonic() - t0))
report(case="late_rank", shared=shared is not None, error=error)
dist.barrier()  # (rank 1 stays alive until rank 0's wait has timed out: a rank that has ended is noticed sooner)
sys.stdout.write("".join(line + "\\n" for line in lines))
sys.stdout.flush()
# Ended without Python's finalization, as the benchmarks' ranks are (rank_exit.py): gloo's threads releasing a
# collective's tensors then aborted a rank now and then on torch 2.14 ("terminate called without an active
# exception", pytorch/pytorch#65231).
os._exit(0)
dist.barrier()
dist.destroy_process_group()
"""

# case: how it is summed where both ranks may share memory (small floating-point sums over gloo)
SUM_CASES = {
    "decode_step": "shared",
    "prefill_out_of_place": "shared",
    "strided": "shared",
    "at_gather_bytes": "shared",
    "above_gather_bytes": "all_reduce",
    "max": "all_reduce",
    "integers": "all_reduce",
}

# which ranks' environment allows shared memory: all, or not all (every rank then gathers)
SHARED_ON = {"both": "0,1", "rank 0 only": "0"}


@pytest.fixture(scope="module", params=list(SHARED_ON))
def sums(request):
    run = run_torchrun(SUMS, nproc=2, timeout=300, env={"SHARED_ON": SHARED_ON[request.param]})
    assert run.returncode == 0, run.stderr[-4000:]
    reported = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return request.param, {(entry["rank"], entry["case"]): entry for entry in reported}


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(SUM_CASES))
def test_small_sums_over_gloo_ranks_equal_the_all_reduce(sums, case):
    """A small floating-point sum over gloo ranks goes through shared memory where every rank may use it,
    else it is an all-gather and a local sum (gloo's all-reduce takes about 15x and up to 2.5x as long): on every rank
    it equals c10d's all-reduce bit for bit, in place where the all-reduce was (else the operand is left as it
    was), and nothing stays pending after the wait; others are c10d's all-reduce."""
    launch, reported = sums
    expected = SUM_CASES[case] if launch == "both" or SUM_CASES[case] != "shared" else "gather"
    for rank in (0, 1):
        entry = reported[rank, case]
        assert entry["path"] == expected
        assert entry["equal"] and entry["pending"] == 0
        assert entry["in_place"] if case != "prefill_out_of_place" else entry["input_kept"]


@pytest.mark.distributed
def test_sums_together_over_gloo_ranks_equal_the_all_reduce(sums):
    _, reported = sums
    for rank in (0, 1):
        assert reported[rank, "together"]["equal"] == [True, True] and reported[rank, "together"]["pending"] == 0


@pytest.mark.distributed
def test_more_sums_in_flight_than_the_ring_has_entries_over_two_groups_equal_the_all_reduce(sums):
    """RING + 2 sums started before any is finished, finished newest first; 2 * RING finished oldest first; one
    held while 3 * RING later ones are made; alternating between two process groups, of two dtypes and several
    sizes: each equals the all-reduce, and none waits forever (a start reads the sum its entry held where this
    rank has not, as every rank does; each group has its own ring)."""
    launch, reported = sums
    for rank in (0, 1):
        entry = reported[rank, "in_flight"]
        assert entry["paths"] == ["shared" if launch == "both" else "gather"]
        assert len(entry["equal"]) == 6 * RING + 3 and all(entry["equal"]) and entry["pending"] == 0


@pytest.mark.distributed
def test_a_sum_a_rank_does_not_take_part_in_raises_within_the_groups_timeout(sums):
    launch, reported = sums
    entry = reported[0, "late_rank"]
    assert entry["shared"] == (launch == "both")
    if launch == "both":
        message, seconds = entry["error"]
        assert "rank(s) [1] have not started sum 1 " in message and "timeout of 2 s" in message
        assert 2 <= seconds <= 10
