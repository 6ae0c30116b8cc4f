"""Shared test configuration: these tests run against the installed thunder with the patch set applied."""

import warnings

import pytest
import torch

import thunder_symbolic

warnings.filterwarnings("ignore", message="transformer_engine module not found")


def pytest_configure(config):
    if not thunder_symbolic.is_active():
        raise pytest.UsageError(f"thunder-symbolic is not active:\n{thunder_symbolic.status()}")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
