"""Shared test configuration: these tests run against the installed thunder with the patch set applied."""

import os
import tempfile
import warnings

import pytest
import torch

import thunder_symbolic

warnings.filterwarnings("ignore", message="transformer_engine module not found")


# Modules that run for minutes, longest first. `make test` runs the suite on every core (pytest-xdist, one
# module per unit of work, handed out in collection order): started first, they finish with the rest.
LONG_RUNNING = (
    "test_fuzz_dynamic_shapes.py",
    "test_dtensor_symbolic.py",
    "test_benchmark_inference.py",
    "test_backward_symbolic.py",
)


def pytest_collection_modifyitems(items):
    first = {name: rank for rank, name in enumerate(LONG_RUNNING)}
    items.sort(key=lambda item: first.get(item.path.name, len(LONG_RUNNING)))


def pytest_configure(config):
    # Verdicts kept across processes: the suite's own, never a developer's (subprocesses inherit the folder).
    os.environ["THUNDER_SYMBOLIC_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-symbolic-tests-")
    if not thunder_symbolic.is_active():
        raise pytest.UsageError(f"thunder-symbolic is not active:\n{thunder_symbolic.status()}")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
