"""Differential fuzzing: generated dynamic-shape programs under symbolic values against eager PyTorch.

Each example is a program and 3-8 argument sets. Every output must equal eager's; an error must be
eager's error type; and the program may compile at most once per distinct (control-flow path, size
class) that the sequence takes — size classes stand for the size-0/1 specializations and the
orderings that slicing by an int decides. More compiles mean a recompilation without a reason.

Profiles (``THUNDER_SYMBOLIC_FUZZ``): ``fast`` (default, derandomized, in the normal test run) and
``long`` (random; ``THUNDER_SYMBOLIC_FUZZ_EXAMPLES``, default 2000; ``make fuzz`` prints a summary).
"""

from __future__ import annotations

import os
import time

import pytest
import thunder
import torch
from hypothesis import HealthCheck, example, given, note, settings
from program_generator import SIZE_CLASSES, Program, argument_sets, programs

from thunder_symbolic.testing import assert_same

PROFILE = os.environ.get("THUNDER_SYMBOLIC_FUZZ", "fast")
if PROFILE not in ("fast", "long"):
    raise ValueError(f"THUNDER_SYMBOLIC_FUZZ must be 'fast' or 'long', not {PROFILE!r}")
EXAMPLES = 300 if PROFILE == "fast" else int(os.environ.get("THUNDER_SYMBOLIC_FUZZ_EXAMPLES", "2000"))

STATS = {"examples": 0, "calls": 0, "compiles": 0, "distinct_shapes": 0, "paths": 0, "errors_matching_eager": 0}


@pytest.fixture(scope="module", autouse=True)
def report():
    start = time.perf_counter()
    yield
    print(
        f"\nfuzz ({PROFILE}): {STATS['examples']} examples, {STATS['calls']} calls, {STATS['compiles']} compiles "
        f"for {STATS['distinct_shapes']} distinct input shapes and {STATS['paths']} path/size classes, "
        f"{STATS['errors_matching_eager']} eager errors reproduced, {time.perf_counter() - start:.0f} s"
    )


def _narrowing_to_width_one() -> Program:
    """Found by the long profile: 3 cols narrow to 1 (4 cols to 2), then `y - y.sum(1, keepdim=True)`
    specializes on that width being 1 — a size class of an intermediate, not of the inputs."""
    narrow = "    if y.shape[0] > 2:\n        y = y * 2 + 1\n    else:\n        y = y[:, : max(y.shape[1] - 1, 1)]"
    loop = "    for _ in range(min(k, 3)):\n        y = y - y.sum(1, keepdim=True)"
    loop_instrumented = "    path.append(min(k, 3))\n" + loop
    plain = "\n".join(["    y = y * 2 + 1", narrow, narrow, loop])
    instrumented = "\n".join(
        [
            "    y = y * 2 + 1" + SIZE_CLASSES,
            narrow.replace("if y.shape[0] > 2", "if path.append(y.shape[0] > 2) or path[-1]") + SIZE_CLASSES,
            narrow.replace("if y.shape[0] > 2", "if path.append(y.shape[0] > 2) or path[-1]") + SIZE_CLASSES,
            loop_instrumented + SIZE_CLASSES,
        ]
    )
    return Program(plain, instrumented, "y")


def size_class(rows: int, cols: int, k: int) -> tuple:
    """What thunder may legitimately specialize on besides control flow: sizes 0/1/2 and k's order to rows."""
    return min(rows, 3), min(cols, 3), min(k, 3), (k > rows) - (k < rows), (k > rows // 2) - (k < rows // 2)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=PROFILE == "fast",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
@given(program=programs(), arguments=argument_sets())
@example(program=_narrowing_to_width_one(), arguments=[(0, 1, 0), (1, 3, 1), (0, 1, 0), (1, 4, 1)])
def test_generated_program_matches_eager(program: Program, arguments):
    note(f"program:\n{program.source()}")
    note(f"arguments (rows, cols, k): {arguments}")
    fn, traced_path = program.compile(), program.compile(instrumented=True)
    jfn = thunder.jit(fn, cache="symbolic values")
    classes, shapes, eager_errors = set(), set(), 0
    for i, (rows, cols, k) in enumerate(arguments):
        x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(i))
        path: list = []
        try:
            expected = traced_path(x.clone(), k, path)
        except Exception as error:  # noqa: BLE001  (thunder must fail the same way)
            eager_errors += 1
            with pytest.raises(type(error)):
                jfn(x.clone(), k)
            continue
        actual = jfn(x.clone(), k)
        assert_same(actual, expected, path=f"call {i} {(rows, cols, k)}", equal_nan=True)
        classes.add((tuple(path), size_class(rows, cols, k)))
        shapes.add((rows, cols, k))
    compiles = thunder.cache_misses(jfn)
    STATS["examples"] += 1
    STATS["calls"] += len(arguments)
    STATS["compiles"] += compiles
    STATS["distinct_shapes"] += len(shapes)
    STATS["paths"] += len(classes)
    STATS["errors_matching_eager"] += eager_errors
    if not eager_errors:  # a failed compile counts as a miss: the bound only holds without errors
        import thunder_symbolic

        reasons = "\n".join(str(m) for m in thunder_symbolic.recompile_reasons(jfn))
        assert compiles <= len(classes), f"{compiles} compiles for {len(classes)} path/size classes:\n{reasons}"
