"""Guard conditions rewritten to compute each repeated term once, for the prologue's fast path.

Guards recorded through a chain of views repeat their terms: GPT-2's 116 guards spell
``((1 * x.shape[0]) * x.shape[1]) // (1 * x.shape[1])`` dozens of times, and checking them cost 60 µs a
call. :func:`shared_terms` rewrites the conditions, in order, so that every term that occurs more than once
is computed once into a local, ``1 * t`` reads ``t`` where ``t`` is an integer term, and a condition that
holds whatever its inputs (``t == t`` over integers) or that repeats an earlier one is dropped.

The rewrite never accepts what the conditions reject: terms are pure (integer and float arithmetic over
sizes and numbers), each is computed where the conditions first evaluate it, and a term inside a
short-circuited operand (``a and b``, ``b if c else d``) is never computed ahead of its condition. The
caller runs the conditions as written whenever the rewrite rejects or raises, so failures are reported
exactly as before.
"""

from __future__ import annotations

import ast
import copy

__all__ = ["shared_terms"]

_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_REFLEXIVE = (ast.Eq, ast.LtE, ast.GtE)  # hold when both sides are one integer


def _is_shape_read(node: ast.AST, shapes: frozenset[str]) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id in shapes
        and isinstance(node.slice, ast.Constant)
        and type(node.slice.value) is int
    )


class _Integers:
    """Which terms are integers whatever the inputs: sizes, int literals, and integer arithmetic of them."""

    def __init__(self, shapes: frozenset[str]):
        self.shapes = shapes
        self.names: set[str] = set()  # locals holding integer terms

    def __call__(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.Name):
            return node.id in self.names
        if _is_shape_read(node, self.shapes):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC):
            return self(node.left) and self(node.right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self(node.operand)
        return False


class _OnesDropped(ast.NodeTransformer):
    """``1 * t`` and ``t * 1`` read ``t`` for an integer term ``t``."""

    def __init__(self, integers: _Integers):
        self.integers = integers

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Mult):
            for one, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(one, ast.Constant) and type(one.value) is int and one.value == 1 and self.integers(other):
                    return other
        return node


def _terms(node: ast.AST, shapes: frozenset[str], conditional: bool = False):
    """``(term, conditional)`` for each term of ``node`` (arithmetic, or a size read from a shape), inner
    terms first, as Python evaluates them; ``conditional`` for those it may skip."""
    if isinstance(node, ast.BoolOp):
        yield from _terms(node.values[0], shapes, conditional)
        for value in node.values[1:]:
            yield from _terms(value, shapes, True)
        return
    if isinstance(node, ast.IfExp):
        yield from _terms(node.test, shapes, conditional)
        yield from _terms(node.body, shapes, True)
        yield from _terms(node.orelse, shapes, True)
        return
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
        return
    if isinstance(node, ast.Compare) and len(node.ops) > 1:  # a chain stops at its first false link
        yield from _terms(node.left, shapes, conditional)
        yield from _terms(node.comparators[0], shapes, conditional)
        for comparator in node.comparators[1:]:
            yield from _terms(comparator, shapes, True)
        return
    for child in ast.iter_child_nodes(node):
        yield from _terms(child, shapes, conditional)
    if isinstance(node, (ast.BinOp, ast.UnaryOp)) or _is_shape_read(node, shapes):
        yield node, conditional


class _Replaced(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit(self, node: ast.AST) -> ast.AST:
        name = self.names.get(ast.dump(node)) if isinstance(node, ast.expr) else None
        if name is not None:
            return ast.Name(id=name, ctx=ast.Load())
        return self.generic_visit(node)


def _always_holds(condition: ast.AST, integers: _Integers) -> bool:
    return (
        isinstance(condition, ast.Compare)
        and len(condition.ops) == 1
        and isinstance(condition.ops[0], _REFLEXIVE)
        and ast.dump(condition.left) == ast.dump(condition.comparators[0])
        and integers(condition.left)
    )


def shared_terms(conditions: list[str], shapes: frozenset[str]) -> list[tuple[list[str], str | None]]:
    """For each condition, in order, ``(assignments, condition)``: the locals to compute before it and the
    condition over them, or None where the condition need not be checked. ``shapes`` names the locals
    holding a tensor's shape (``_shape0``), whose items are sizes."""
    integers = _Integers(shapes)
    trees = [_OnesDropped(integers).visit(ast.parse(c.strip(), mode="eval").body) for c in conditions]
    counts: dict[str, int] = {}
    for tree in trees:
        for term, _ in _terms(tree, shapes):
            key = ast.dump(term)
            counts[key] = counts.get(key, 0) + 1
    names: dict[str, str] = {}  # a computed term's dump -> its local
    seen: set[str] = set()
    out: list[tuple[list[str], str | None]] = []
    for tree in trees:
        assignments = []
        for term, conditional in _terms(tree, shapes):
            key = ast.dump(term)
            if conditional or counts[key] < 2 or key in names:
                continue
            value = ast.unparse(_Replaced(names).visit(copy.deepcopy(term)))
            name = names[key] = f"_term{len(names)}"
            if integers(term):
                integers.names.add(name)
            assignments.append(f"{name} = {value}")
        condition = _Replaced(names).visit(tree)
        text = ast.unparse(condition)
        if _always_holds(condition, integers) or text in seen:
            out.append((assignments, None))
            continue
        seen.add(text)
        out.append((assignments, text))
    return out
