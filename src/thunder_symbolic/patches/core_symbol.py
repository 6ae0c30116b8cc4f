"""Patches of ``thunder/core/symbol.py``: every dynamic dim a trace uses is produced in that trace; a symbol that
raises closes its scope; a meta function's signature is read once; swapping proxies leaves no reference cycle; a
bound symbol made from another keeps the flattening of the arguments and output they share."""

from __future__ import annotations

import functools
import inspect

from thunder.core import compile_data, prims, pytree
from thunder.core.baseutils import check
from thunder.core.proxies import CollectionProxy, NumberProxy, Proxy, TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.trace import get_tracectx

from thunder_symbolic.activation.registry import patch

_PRODUCED = "_thunder_symbolic_produced"
# Unpacking hands over values made elsewhere (inputs, saved tensors): where their dims are needed, the
# safety net after DCE (patches.core_transform_common) produces them with an executable operation.
_UNPACKS = frozenset(p for p in prims.PrimIDs if p.name.startswith("UNPACK_"))


def _needs_producer(dim) -> bool:
    # Input dims have provenance (the prologue unpacks them); dims computed by meta functions have none.
    return isinstance(dim, NumberProxy) and dim.history is None and not getattr(dim, _PRODUCED, False)


def materialize_dims(trace, outputs) -> None:
    """Mark the numbers in ``outputs`` produced; bind ``prims.shape`` for tensors with unproduced dims."""
    for out in outputs:
        if isinstance(out, NumberProxy):
            object.__setattr__(out, _PRODUCED, True)
        elif isinstance(out, TensorProxy) and any(_needs_producer(d) for d in out._shape):
            # Dims produced elsewhere appear as their int value, which the trace prints as `_`.
            fresh = tuple(d if _needs_producer(d) else getattr(d, "value", d) for d in out._shape)
            trace.bound_symbols.append(prims.shape.bind(out, output=fresh))
            for d in fresh:
                if isinstance(d, NumberProxy):
                    object.__setattr__(d, _PRODUCED, True)


@patch(
    "thunder.core.symbol:Symbol.__call__",
    summary="after a top-level symbol returns a tensor with new symbolic dims, binds prims.shape to produce them; "
    "a symbol that raises leaves the trace's scopes as it found them",
    why=(
        "Dims computed inside meta functions (outputs of cat, slicing, reshape) were NumberProxies nothing "
        "produced: using them (numel(), size arithmetic) failed while building the prologue ('has history None'). "
        "A symbol that raised left the scope it had opened: when the traced code caught the error (`try: "
        "x.view(4, -1) except RuntimeError:`), every later operation went into that dead scope and thunder failed "
        "at the return (IndexError: pop from empty list, either cache)."
    ),
    upstream="Lightning-AI/lightning-thunder#2746, #471",
)
def _symbol_call(original):
    def __call__(self, *args, **kwargs):
        trace = get_tracectx()
        depth = len(trace.scopes) if trace is not None else 0
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            if trace is not None:
                del trace.scopes[depth:]  # with what the failed call had recorded in them
            raise
        if compile_data.using_symbolic_values() and self.id not in _UNPACKS:
            trace = get_tracectx()
            if trace is not None and trace.peek_scope() is trace.bound_symbols:
                materialize_dims(trace, tree_flatten(result)[0])
        return result

    return __call__


@patch(
    "thunder.core.symbol:Symbol.normalize",
    summary="binds a call's arguments to its meta function's signature, read once per meta function; a call "
    "passing every parameter by position is taken as it is",
    why=(
        "Every bound symbol normalizes its arguments, and 0.2.6 builds the meta function's inspect.Signature "
        "each time: a twentieth of thunder's compile of the inference benchmark's prefill. Binding by the "
        "signature then still cost 15 us a call (4,768 calls in that compile, three in four by position)."
    ),
    replaces=True,
)
def _normalize(original):
    def normalize(self, *args, **kwargs):
        """Replaces ``Symbol.normalize``: its one expensive step is the signature, which a wrapper cannot
        reuse. A meta that cannot be a cache key (unhashable) goes to the original. A call that passes every
        parameter by position (three calls in four) is bound as it is."""
        try:
            signature, positional = _signature(self.meta)
        except TypeError:
            return original(self, *args, **kwargs)
        if not kwargs and len(args) == positional:
            return args, {}
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args, bound.kwargs

    return normalize


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@functools.lru_cache(maxsize=4096)
def _signature(meta) -> tuple[inspect.Signature, int | None]:
    """The signature, and its number of parameters when all can be passed by position (else None)."""
    signature = inspect.signature(meta)
    parameters = signature.parameters.values()
    return signature, len(parameters) if all(p.kind in _POSITIONAL for p in parameters) else None


@patch(
    "thunder.core.symbol:BoundSymbol.from_bsym_swap_proxies",
    summary="swaps proxies with a module function instead of a closure that calls itself, made at every call; a "
    "subsymbol in which nothing is swapped is kept, not copied",
    why=(
        "0.2.6's swap is a nested function that refers to itself: each call leaves a reference cycle for "
        "Python's cyclic collector (4,889 in a compile of the inference benchmark's prefill, where compiles "
        "run with the collector paused, so the first collection after it scans them all), and it builds an "
        "empty set for every leaf it swaps. And it copies every subsymbol at every depth: in a compile of "
        "the benchmark's prefill, 2,100 of the 3,600 subsymbols swapped had nothing to swap."
    ),
    replaces=True,
)
def _from_bsym_swap_proxies(original):
    def from_bsym_swap_proxies(self, swap_map, skip_inputs=False, skip_output=False, skip_subsymbols=False):
        """Replaces thunder's BoundSymbol.from_bsym_swap_proxies (same result): wrapping would keep its closure."""
        if len(swap_map) == 0:
            return self
        return _swapped_bsym(self, swap_map, skip_inputs, skip_output, skip_subsymbols)

    return from_bsym_swap_proxies


def _swapped_bsym(bsym, swap_map, skip_inputs, skip_output, skip_subsymbols=False, subsymbol=False):
    """``bsym`` with its proxies swapped, always a new bound symbol as thunder's swap returns; a subsymbol in
    which nothing (at any depth) is swapped is the subsymbol itself: bound symbols are shared between traces
    as from_bsym shares a parent's subsymbols."""
    inputs = (bsym.args, bsym.kwargs)
    args, kwargs = inputs if skip_inputs else _swapped(inputs, swap_map, bsym.flat_args_and_spec)
    output = bsym.output if skip_output else _swapped(bsym.output, swap_map, bsym.flat_outs_and_spec)
    if skip_subsymbols:
        subsymbols = list(bsym.subsymbols)
    else:
        subsymbols = [_swapped_bsym(s, swap_map, skip_inputs, skip_output, subsymbol=True) for s in bsym.subsymbols]
    unchanged = args is bsym.args and kwargs is bsym.kwargs and output is bsym.output
    if subsymbol and unchanged and all(new is old for new, old in zip(subsymbols, bsym.subsymbols)):
        return bsym
    return bsym.from_bsym(args=args, kwargs=kwargs, output=output, subsymbols=subsymbols)


# BoundSymbol's cached properties computed from its arguments, and from its output (thunder caches them on the
# assumption that a bound symbol's arguments and output are immutable)
_FROM_ARGUMENTS = ("flat_args_and_spec", "flat_args", "flat_proxy_args", "flat_variableified_proxy_args",
                   "_var_args", "_var_kwargs")  # fmt: skip
_FROM_OUTPUT = ("flat_outs_and_spec", "flat_outs", "flat_proxy_outs", "flat_variableified_proxy_outs", "_var_output")


@patch(
    "thunder.core.symbol:BoundSymbol.from_bsym",
    summary="a bound symbol made from another with the same arguments (or output) keeps what the other computed "
    "from them: their flattening, proxies and variableified forms",
    why=(
        "Every pass makes new bound symbols from the old ones (from_bsym), most with the same arguments and "
        "output objects, and thunder computes their flattening again for each new one: about 23,000 "
        "flattenings in a compile of the inference benchmark's prefill, a tenth of its transforms."
    ),
)
def _from_bsym(original):
    def from_bsym(self, **kwargs):
        bsym = original(self, **kwargs)
        known, made = self.__dict__, bsym.__dict__
        if bsym.args is self.args and bsym.kwargs is self.kwargs:
            for name in _FROM_ARGUMENTS:
                if name in known:
                    made.setdefault(name, known[name])
        if bsym.output is self.output:
            for name in _FROM_OUTPUT:
                if name in known:
                    made.setdefault(name, known[name])
        return bsym

    return from_bsym


def _swapped(tree, swap_map, flat=None):
    """``tree`` with each proxy replaced by the end of its chain of swaps in ``swap_map`` (the proxies of a
    collection proxy's collection too, in place); ``tree`` itself where no proxy in it is swapped. ``flat`` is
    ``tree`` flattened already (a bound symbol keeps its arguments and output flattened)."""
    leaves, spec = pytree.tree_flatten_with_dataclass(tree) if flat is None else flat
    swapped, changed = [], False
    for leaf in leaves:
        if isinstance(leaf, CollectionProxy):
            leaf.coll = pytree.tree_map(functools.partial(_swapped, swap_map=swap_map), leaf.collection())
        if isinstance(leaf, Proxy):
            end = _swap_chain_end(leaf, swap_map)
            changed = changed or end is not leaf
            leaf = end
        swapped.append(leaf)
    return pytree.tree_unflatten(swapped, spec) if changed else tree


def _swap_chain_end(proxy, swap_map):
    key, visited = variableify(proxy), None
    while key in swap_map:
        if swap_map[key] is proxy:
            break
        visited = set() if visited is None else visited
        check(key not in visited, lambda: f"Detected a cycle while swapping; the cycle includes {visited}")
        visited.add(key)
        proxy = swap_map[key]
        key = variableify(proxy)
    return proxy
