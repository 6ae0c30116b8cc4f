"""Hypothesis strategies for small dynamic-shape programs and the argument sequences to run them on.

A program is Python source: a function ``f(x, k)`` of a 2-D tensor and an int that applies a list of
statements to ``y`` (always 2-D) and returns tensors, sizes and ints. Control-flow statements come in
two spellings: the plain one that thunder traces, and an instrumented one that records each decision
in ``path``, so that running the instrumented program eagerly tells which control-flow path an
argument set takes. The instrumented spelling also records, after each statement, whether each dim of
``y`` is 0, 1 or more: thunder legitimately specializes on intermediate sizes of 0 and 1 (broadcasting,
empty slices), so these belong to the path too. Failures shrink to a short program, printed as runnable
Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

# (plain, instrumented) statement templates; {c} is a small constant.
STRAIGHT = [
    "y = y * 2 + 1",
    "y = torch.relu(y) - torch.sin(y)",
    "y = y.exp().clamp(max=10.0)",
    "y = y + y[:1]",
    "y = y + y[:, :1]",
    "y = y * y.mean(0, keepdim=True)",
    "y = y - y.sum(1, keepdim=True)",
    "y = y[:k]",
    "y = y[k:]",
    "y = y[: y.shape[0] // 2 + 1]",
    "y = y[:, : max(y.shape[1] - 1, 1)]",
    "y = y.reshape(-1, y.shape[1])",
    "y = y.flatten().reshape(y.shape[0], -1)",
    "y = y.t().contiguous().t()",
    "y = torch.cat([y, y], 0)",
    "y = torch.cat([y, y[:1]], 0)",
    "y = torch.stack([y, y]).sum(0)",
    "y = y[:1].expand(y.shape[0] + 1, -1) * 1",
    "y = y.sum(0, keepdim=True)",
    "y = y.amax(1, keepdim=True)",
    "y = y @ y.t()",
    "y = torch.softmax(y, dim=-1)",
    "y = y + torch.ones(y.shape[0], 1)",
    "y = torch.zeros(y.shape[0], 2) + y.sum()",
    "y = y + torch.arange(y.shape[1])",
    "y = y * (y.shape[0] + k)",
    "y = y * y.numel()",
]
BRANCHES = [
    "y.shape[0] > {c}",
    "y.shape[1] == {c}",
    "k % 2 == 0",
    "min(y.shape[0], k) > {c}",
    "y.numel() >= {c}",
    "k > y.shape[0]",
]


@dataclass(frozen=True)
class Program:
    plain: str
    instrumented: str
    returns: str

    def source(self, *, instrumented: bool = False) -> str:
        body = self.instrumented if instrumented else self.plain
        head = "def f(x, k, path):" if instrumented else "def f(x, k):"
        return f"{head}\n    y = x\n{body}\n    return {self.returns}\n"

    def compile(self, *, instrumented: bool = False):
        namespace = {"torch": torch}
        exec(self.source(instrumented=instrumented), namespace)
        return namespace["f"]


SIZE_CLASSES = "\n    path.append(tuple(min(d, 2) for d in y.shape))"


@st.composite
def statements(draw) -> tuple[str, str]:
    if draw(st.booleans()):
        stmt = draw(st.sampled_from(STRAIGHT))
        return f"    {stmt}", f"    {stmt}{SIZE_CLASSES}"
    if draw(st.booleans()):
        condition = draw(st.sampled_from(BRANCHES)).format(c=draw(st.integers(0, 6)))
        then, other = draw(st.sampled_from(STRAIGHT)), draw(st.sampled_from(STRAIGHT))
        plain = f"    if {condition}:\n        {then}\n    else:\n        {other}"
        instrumented = f"    if path.append({condition}) or path[-1]:\n        {then}\n    else:\n        {other}"
        return plain, instrumented + SIZE_CLASSES
    bound = draw(st.sampled_from(["min(k, 3)", "min(y.shape[0], 3)"]))
    stmt = draw(st.sampled_from(STRAIGHT[:7]))
    plain = f"    for _ in range({bound}):\n        {stmt}"
    instrumented = f"    path.append({bound})\n    for _ in range({bound}):\n        {stmt}"
    return plain, instrumented + SIZE_CLASSES


@st.composite
def programs(draw) -> Program:
    body = draw(st.lists(statements(), min_size=1, max_size=5))
    returns = draw(st.sampled_from(["y", "y, y.shape[0]", "y.sum(0), k * 2", "y, y.shape[0] * y.shape[1] + k"]))
    return Program("\n".join(p for p, _ in body), "\n".join(i for _, i in body), returns)


@st.composite
def argument_sets(draw) -> list[tuple[int, int, int]]:
    """3 to 8 (rows, cols, k) triples; rows and k include 0 and 1, where implicit specializations live."""
    triple = st.tuples(st.integers(0, 9), st.integers(1, 4), st.integers(0, 7))
    return draw(st.lists(triple, min_size=3, max_size=8))
