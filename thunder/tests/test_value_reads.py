"""Every place thunder reads a symbolic number's value directly (not through a conversion the patch set
guards) is listed here with how it is covered; the test fails when thunder's source gains or loses one.

Conversions (``bool``/``int``/``float``/``index``/``hash`` of a NumberProxy) record guards themselves. The
reads below bypass them: ``pyval(x)``, ``utils.get_numberlike_value(x)`` and ``x.value``. Each is either
routed through :func:`thunder_symbolic.guards.recorder.python_value` by a patch (a pin), or cannot change
what a trace computes (printing, bookkeeping, a value propagated to an operation that stays in the trace).
"""

import ast
from pathlib import Path

import thunder

FILES = (
    "core/proxies.py",
    "core/prims.py",
    "core/utils.py",
    "core/baseutils.py",
    "core/transforms.py",
    "core/transform_common.py",
    "clang/__init__.py",
    "torch/__init__.py",
    "executors/torchex.py",
    "executors/pythonex.py",
    "executors/torch_compile.py",
)
READERS = frozenset({"pyval", "get_numberlike_value"})

PINNED = "pinned through python_value by a patch"
CONVERSION = "a conversion: patched to record a guard (patches.core_proxies)"
BOOKKEEPING = "naming, printing or copying a proxy: decides nothing in the trace"
PROPAGATED = "computes the result proxy's value; the operation stays in the trace and runs on real values"
VALIDATION = "decides only whether an error is raised; the kernel raises as eager does"

KNOWN = {
    # clang
    "clang/__init__.py:_advanced_indexing._to_tensorproxies": PINNED + " (clang_init._advanced_indexing)",
    "clang/__init__.py:where": PINNED + " (clang_init.where)",
    # prims
    "core/prims.py:_check_literal_like_meta": "the meta of a prologue check, reading what it checks",
    "core/prims.py:_convert_element_type_meta": PROPAGATED,
    "core/prims.py:_elementwise_binary_meta_factory.meta": PROPAGATED
    + "; the type follows the operands' types, and int ** int guards its exponent's sign (core_proxies)",
    "core/prims.py:_elementwise_unary_meta_factory.meta": PROPAGATED,
    "core/prims.py:flip_meta": VALIDATION,
    "core/prims.py:imag_meta": "Python complex constants only (a ComplexProxy fails the type check first)",
    "core/prims.py:real_meta": "Python complex constants only (a ComplexProxy fails the type check first)",
    # proxies
    "core/proxies.py:NumberProxy._elementwise_binary_helper": "outside a trace only; inside one the patched "
    "helper records a pin of any value computed in Python (core_proxies._derive)",
    "core/proxies.py:NumberProxy._elementwise_unary_helper": "as the binary helper",
    "core/proxies.py:_infer_tensor_properties": "constant values only (every dim is a checked constant there)",
    "core/proxies.py:NumberProxy.__bool__": CONVERSION,
    "core/proxies.py:NumberProxy.__int__": CONVERSION,
    "core/proxies.py:NumberProxy.__float__": CONVERSION,
    "core/proxies.py:NumberProxy.__complex__": CONVERSION,
    "core/proxies.py:NumberProxy.__hash__": CONVERSION,
    "core/proxies.py:IntegerProxy.__index__": CONVERSION,
    "core/proxies.py:NumberProxy.make_static_constrained": "checks the value exists; the numbers thunder makes "
    "static are pinned where it does so (a truth value: a predicate guard; a device index: see torch_device)",
    "core/proxies.py:NumberProxy.__init__": BOOKKEEPING,
    "core/proxies.py:NumberProxy.known_value": BOOKKEEPING,
    "core/proxies.py:NumberProxy.replace": BOOKKEEPING,
    "core/proxies.py:IntegerProxy.replace": BOOKKEEPING,
    "core/proxies.py:FloatProxy.replace": BOOKKEEPING,
    "core/proxies.py:ComplexProxy.replace": BOOKKEEPING,
    "core/proxies.py:IntegerProxy.__repr__": BOOKKEEPING,
    "core/proxies.py:FloatProxy.__repr__": BOOKKEEPING,
    "core/proxies.py:IntegerProxy.type_string": BOOKKEEPING,
    "core/proxies.py:FloatProxy.type_string": BOOKKEEPING,
    "core/proxies.py:ComplexProxy.type_string": BOOKKEEPING,
    "core/proxies.py:StringProxy.__init__": BOOKKEEPING,
    "core/proxies.py:StringProxy.__hash__": "str inputs are pinned by value (check_string_value)",
    "core/proxies.py:StringProxy.__repr__": BOOKKEEPING,
    "core/proxies.py:StringProxy.__str__": "str inputs are pinned by value (check_string_value)",
    "core/proxies.py:StringProxy.replace": BOOKKEEPING,
    "core/proxies.py:pyval": "the helper itself (its callers are listed)",
    # utils, transforms
    "core/utils.py:get_numberlike_value._extract": "the helper itself (its callers are listed)",
    "core/utils.py:check_no_duplicates._reify": VALIDATION + " (dims were canonicalized through guarded comparisons)",
    "core/baseutils.py:init_colors": "an Enum member's value (terminal colors), not a number",
    "core/transform_common.py:remove_duplicate_number_proxies.keep_or_swap": "DCE keeps one producer per number; "
    "the dims safety net (core_transform_common) produces the dims it replaced",
    "core/transforms.py:ZeroBackward.__call__.zeros_like": "the value's type only",
    "core/transforms.py:value_and_grad.ones_like": "the value's type only",
    "core/transforms.py:_update_forward_with_new_saved_for_backward": "TransformerEngine executor only (CUDA)",
    # torch
    "torch/__init__.py:_get_fake_arg": PINNED + " (torch_init._get_fake_arg: fallback ops)",
    "torch/__init__.py:torch_device": PINNED + " (core_jit_ext.general_jit_lookaside: torch.device's index)",
    "torch/__init__.py:flip": VALIDATION,
}


def direct_reads(source: str) -> set[str]:
    """Qualified names of the functions in ``source`` that call pyval/get_numberlike_value or read ``.value``."""
    found, scope = set(), []

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node):
            scope.append(node.name)
            self.generic_visit(node)
            scope.pop()

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

        def visit_Call(self, node):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in READERS:
                found.add(".".join(scope) or "<module>")
            self.generic_visit(node)

        def visit_Attribute(self, node):
            if node.attr == "value":
                found.add(".".join(scope) or "<module>")
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


def test_every_direct_read_of_a_numbers_value_is_covered():
    root = Path(thunder.__file__).parent
    found = {f"{path}:{name}" for path in FILES for name in direct_reads((root / path).read_text())}
    new, gone = sorted(found - KNOWN.keys()), sorted(KNOWN.keys() - found)
    assert not new, f"thunder reads a number's value in places not reviewed: {new} (cover them, then list them)"
    assert not gone, f"listed reads no longer exist in thunder: {gone} (remove them from the list)"


def test_the_reader_finds_each_kind_of_read():
    source = "def a(x):\n    return pyval(x)\nclass B:\n    def c(self, x):\n        return x.value\n"
    assert direct_reads(source) == {"a", "B.c"}
