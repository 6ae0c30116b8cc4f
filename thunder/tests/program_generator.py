"""Hypothesis strategies for small dynamic-shape programs and the argument sequences to run them on.

A program is Python source: a function ``f(x, k, n, mask, sizes, cfg, dtype, act, s, color)`` of a 2-D tensor,
an int and the Python values a real program depends on (None-or-int, None-or-tensor, a tuple of varying
length, or a frozenset, a range, bytes, a deque or an OrderedDict, a dict with an optional key and keys named
with quotes or a backslash, a dtype, a callable, a float among -0.0/NaN/inf, an enum, a str), which also reads
state changed between calls: a global list ``G``, attributes of a global object ``M`` (``M.scale``, None or a
float; ``M.gain`` and ``M.offset``, missing or set, the latter read through ``vars(M)`` and ``M.__dict__``), the
default argument of a global function ``H``, an attribute of a config module ``C`` (None or a callable), an
environment variable, a global object ``O`` of one of two classes (``isinstance``, a class attribute read
through ``type(O)`` and changed), a global ``nn.ModuleList`` ``L`` of 1 to 3 layers with a parameter each
(appended to and cut between calls: iterated, reversed, indexed from the end, counted), a ``ContextVar`` ``V``, a
numpy number ``N`` and a module ``S`` whose buffer is None or a tensor. Some statements have side effects on
state that existed before the call, compared with eager's after every call (:func:`state_of`): a global list
``W`` grown and reordered, a global dict ``D``, attributes of ``M`` and of the class ``Counter``, new ``Box``
objects kept in ``B``, records of a logger ``LOG``. It applies a list of
statements to ``y`` (always 2-D) and returns tensors, sizes and ints; some statements make Python look at a
symbolic number (list indices, f-string keys, str, a fallback op, a max of an int and a float,
isinstance/type) or at a size built from a shape (a torch.Size: its type, numel) or a tensor's dtype and
device (torch's objects: identity, str, isinstance), others take gradients 0.2.6 got wrong or could not take
(a 0-d operand, index_put's values, list-taking fallback ops, an empty arange, `%`, nll_loss), read a named
tuple's fields (``.values``), use torch's older argument forms (``unbiased=``), update a view in place and
assign it back, or catch the error of an operation (a ``view`` the size does not divide). Control-flow
statements come in two spellings: the plain one that thunder traces, and an instrumented one that records
each decision (and each value Python read) in ``path``, so that running the instrumented program eagerly
tells which control-flow path an argument set takes. The instrumented spelling
also records, after each statement, whether each dim of ``y`` is 0, 1 or more: thunder legitimately
specializes on intermediate sizes of 0 and 1 (broadcasting, empty slices), so these belong to the path too.
Failures shrink to a short program, printed as runnable Python.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import enum
import logging
import math
import os
import types
from dataclasses import dataclass

import numpy
import torch
from hypothesis import strategies as st


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Wide:
    factor = 2.0


class Narrow:
    factor = 0.5  # changed between calls (Extras.narrow_factor)


class Step(torch.nn.Module):
    """A layer of ``L``: a call of a module, and a read of its parameter (torch's ``Module.__getattr__``)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(0.5), requires_grad=False)

    def forward(self, t):
        return t * self.weight + 1


class Shift(torch.nn.Module):
    """A module whose buffer is None or a tensor (``S.shift``, set between calls)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("shift", None)

    def forward(self, t):
        return t if self.shift is None else t + self.shift


class Box:
    """An object a program makes and keeps in a global list (``B``): the replay builds it anew on every call."""

    def __init__(self, rows, t):
        self.rows, self.t = rows, t


def _logger(namespace) -> logging.Logger:
    """A logger of its own per namespace, whose records (the message as formatted) go to ``namespace['RECORDS']``."""
    records = namespace["RECORDS"] = []
    logger = logging.getLogger(f"thunder_symbolic.fuzz.{id(namespace)}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger.handlers[:] = [handler]
    return logger


def state_of(namespace) -> dict:
    """The state a program's side effects change (compared with eager's after every call)."""
    return {
        "W": list(namespace["W"]),
        "D": dict(namespace["D"]),
        "M": {k: v for k, v in vars(namespace["M"]).items() if k in ("last", "seen", "total")},
        "calls": namespace["Counter"].calls,
        "B": [(box.rows, box.t) for box in namespace["B"]],
        "records": list(namespace["RECORDS"]),
    }


class Scale(torch.autograd.Function):
    """A custom autograd.Function with a non-tensor argument (its apply is a C classmethod from torch 2.13)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


PARAMETERS = "x, k, n, mask, sizes, cfg, dtype, act, s, color, tag"
ENVIRONMENT_VARIABLE = "THUNDER_SYMBOLIC_FUZZ_FACTOR"  # set by Extras.set_state, removed by reset_state

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
    # Sizes that stay symbolic (one program across sizes): factories, narrow, chunk, len, cat, arange, complex views,
    # einsum, windows, tile, casts, storage sizes and norms.
    "y = y + torch.arange(k, k + y.shape[1])",
    "y = y.new_full((y.shape[0], 2), 0.5) + y.new_zeros(y.shape[0], 1) + y.sum(1, keepdim=True)",
    "y = torch.narrow(y, 0, y.shape[0] // 2, y.shape[0] - y.shape[0] // 2)",
    "y = y.chunk(2)[0] * 2",
    "y = y * len(y)",
    "y = y * torch.tensor(k) + torch.tensor(y.shape[0])",
    "y = y + torch.einsum('i,j->ij', torch.arange(y.shape[0]) * 0.5, y.sum(0))"
    " - torch.einsum('ij,kj->ik', y, y).sum(1, keepdim=True) * 0.01",
    "y = torch.cat([y, torch.ones(2, y.shape[1])], 0).unfold(0, 2, 1).sum(-1)[: y.shape[0]] + y.tile(2, 1)[: y.shape[0]]",
    "y = y.half().float() + y.double().float() * y.itemsize + y.nbytes % 7",
    "y = torch.nn.functional.normalize(y, dim=-1) + torch.linalg.vector_norm(y, dim=1, keepdim=True)",
    # No gradient through a detached tensor; an input's layout, checked.
    "y = y * y.detach().mean() + y.data * 0.5 + (x.layout == torch.strided and not x.is_sparse)",
    # Sizes Python builds from a shape: a torch.Size in eager, as its type, isinstance and numel tell.
    "y = y.view(torch.Size([y.shape[0], y.shape[1]]) + (1,)).sum(-1) * (isinstance(y.shape[1:], torch.Size) + 1)",
    "y = y.reshape(y.shape[:1] + (y.shape[1],)) * (y.shape[1:].numel() if type(y.size()) is torch.Size else -1)",
    "y = Scale.apply(y, 2.0) + 1",
    "y = torch.cat([y[:k], y[k:] * 2], 0)",
    "y = torch.view_as_real(torch.view_as_complex(torch.cat([y, y], 1).reshape(y.shape[0], -1, 2))"
    " * torch.polar(torch.ones(y.shape[1]), torch.arange(y.shape[1]) * 0.5)).flatten(1)",
    "y = torch.view_as_real(torch.view_as_complex(torch.stack([y, y * 0.5], -1)).conj().resolve_conj() * 2j)"
    ".flatten(1)",
    "y = torch.view_as_real(torch.view_as_complex(torch.stack([y, -y], -1))[:, : max(y.shape[1] - 1, 1)]).flatten(1)",
    # thunder refuses this gradient for complex tensors (not PyTorch's conjugate one); its forward runs.
    "y = torch.view_as_real(torch.view_as_complex(torch.stack([y, y], -1)).sqrt()).flatten(1)",
    # Gradients 0.2.6 got wrong or could not take: a 0-d operand, index_put's values, ops without a rule.
    "y = y * (1 + y.abs().sum())",
    "y = torch.atan2(y, y.sum() + 1)",
    "y = y.index_put((torch.arange(y.shape[0]),), y * 3, accumulate=True)",
    "y = torch.minimum(y, y.flip(0)) + torch.lerp(y, y.flip(1), 0.3)",
    "y = torch.remainder(y, 0.7) + torch.fmod(y, -0.6)",
    "y = y * len(torch.arange(k)) + torch.arange(k).ndim",
    "y = y % 0.7 - y % -(k + 1)",
    "y = y + torch.nn.functional.nll_loss(torch.log_softmax(y, -1), torch.arange(y.shape[0]) % y.shape[1])",
    # Named tuples (torch.return_types), which thunder's operators return as plain tuples.
    "y = y.sort(0, descending=True).values + y.max(1, keepdim=True).values * y.topk(1).indices",
    # torch's older argument forms, which thunder's operators do not take.
    "y = y - y.var(1, keepdim=True, unbiased=False) + torch.std(y, 0, True, True)",
    # In-place updates: of a view assigned back (differentiated), of a new tensor (fill_).
    "y = y * 1; y[:, :1] += y[:, -1:] * 2",
    "y = y + torch.empty(y.shape).fill_(0.5) + torch.eye(y.shape[0], y.shape[1])",
    # Python values: each decides the program by identity, type, length, keys or bits.
    "y = y * 2 if n is None else y + n",
    "y = y if mask is None else y + mask.sum()",
    "y = y * len(sizes) + sizes[0]",
    "y = y * len(sizes) - sum(sizes)",
    "y = y + cfg['bias'] if 'bias' in cfg else y * cfg['scale']",
    "y = (y.to(dtype) * 3).to(torch.float32)",
    "y = y * (y.to(dtype).dtype is dtype) + len(str(y.to(dtype).dtype)) + isinstance(y.device, torch.device)",
    "y = act(y)",
    "y = y * math.copysign(1.0, s) if s == s else y - 1",
    "y = y.clamp(max=s) if math.isinf(s) else y",
    "y = y * 2 if color is Color.RED else y - 1",
    "y = y * G[0] * len(G)",
    "y = y if M.scale is None else y * M.scale",
    "y = y * sum(*(sizes,)) + pow(*(G[0], 2))",
    # An attribute found missing (then set), a default argument (then replaced).
    "y = y * getattr(M, 'gain', 1.0) + hasattr(M, 'gain')",
    "y = H(y)",
    # A str argument, which Python reads as text.
    "y = y * int(tag) + len(tag + '!') + (tag < '3') + len(repr(tag))",
    # An object's __dict__ read as a dict, a Python module's attribute, an environment variable.
    "y = y + vars(M).get('offset', 0.0) + ('offset' in M.__dict__)",
    "y = y if C.post is None else C.post(y)",
    f"y = y * float(os.environ.get('{ENVIRONMENT_VARIABLE}', '1'))",
    # An object's type (dispatch on it) and a class attribute read through it.
    "y = y * 2 if isinstance(O, Wide) else y * type(O).factor",
    # A module list's layers (iterated, the last, their number), a context variable, a caught error.
    "y = torch.stack([layer(y) for layer in L]).sum(0) + L[-1](y) * len(L)",
    "y = torch.stack([layer(y) for layer in reversed(L)]).prod(0) + S(y)",
    "y = y * V.get()",
    "y = R(y)",
    # numpy numbers given to operators, and a numpy function of a float argument.
    "y = y * N + N * y.mean(0) + torch.full(y.shape[1:], N)",
    "y = y * float(np.sqrt(abs(s))) if math.isfinite(s) else y",
    # Side effects on state that existed before the call (compared with eager's after every call): a list grown
    # and reordered, a dict changed, attributes of an object and of a class, a new object kept, a log record.
    "W.append(y.sum(0)); W.insert(0, k); W.append(y.shape[0])",
    "W.reverse() if len(W) > 1 else W.append('x'); W.extend([1.5, 'y']); y = y + len(W)",
    "D['rows'] = y.shape[0]; D['mean'] = y.mean(); D.pop('old', None)",
    "M.last = y.shape[1]; M.seen = 'yes'; M.total = y.sum()",
    "Counter.calls = Counter.calls + 1; y = y * Counter.calls",
    "B.append(Box(y.shape[0], y * 2))",
    "LOG.info('rows %d, k %d', y.shape[0], k)",
]
# (statement, what it reads of a symbolic number's value): Python looks at the number (text, an index, a
# fallback op's fake run, the type of a mixed max), so the value read is pinned and belongs to the path.
PINNING = [
    ("y = y[[0, y.shape[0] - 1]] if y.shape[0] > 0 else y", "y.shape[0]"),
    ("y = y * {'0': 1.0, '1': 2.0}.get(f'{k % 2}', 3.0)", "k % 2"),
    ("y = y + len(str(y.shape[1]))", "y.shape[1]"),
    ("y = y * len(f'{y.shape}')", "tuple(y.shape)"),
    ("y = torch.narrow_copy(y, 1, 0, 1) if y.shape[1] > 0 else y", "tuple(y.shape)"),
    ("y = torch.vstack([y, 2 * y]) + torch.hstack([y, y])[:, : y.shape[1]].repeat(2, 1)", "tuple(y.shape)"),
    ("y = y * max(k, 2.5)", "2.5 > k"),
    ("y = y.split(2)[-1] + 1", "(y.shape[0] + 1) // 2"),
    ("y = y.sum(k % 2, keepdim=True)", "k % 2"),
    ("y = y * 2 if isinstance(k, int) and type(y.shape[0]) is int else y - 1", "True"),
    ("y = y * (k.real + k.bit_length() + y.shape[0].numerator) + s.imag", "k"),
    ("y = y + torch.tensor([y.shape[1], k]).sum()", "(y.shape[1], k)"),
]
BRANCHES = [
    "y.shape[0] > {c}",
    "y.shape[1] == {c}",
    "k % 2 == 0",
    "(2 * y.shape[0] + 4 * k + {c}) % 4 < 2",  # a remainder of a sum: multiples of the divisor drop out
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
        head = f"def f({PARAMETERS}, path):" if instrumented else f"def f({PARAMETERS}):"
        return f"{head}\n    y = x\n{body}\n    return {self.returns}\n"

    def compile(self, *, instrumented: bool = False):
        """The function, and its globals (set ``G``, ``M``'s attributes, ``H``'s default and ``C.post`` there before
        each call)."""
        namespace = {"torch": torch, "math": math, "os": os, "np": numpy, "Color": Color, "Scale": Scale, "Wide": Wide}
        namespace.update(G=[1.0], M=types.SimpleNamespace(scale=None), C=types.ModuleType("run_config"))
        namespace.update(L=torch.nn.ModuleList([Step()]), V=contextvars.ContextVar("factor", default=1.0), S=Shift())
        counter = type("Counter", (), {"calls": 0})  # (a class of its own: its attribute is the program's state)
        namespace.update(W=[], D={}, B=[], Box=Box, Counter=counter, LOG=_logger(namespace))
        exec("def H(t, d=None):\n    return t if d is None else t * d\n", namespace)
        exec(_CATCHING, namespace)
        exec(self.source(instrumented=instrumented), namespace)
        return namespace["f"], namespace


SIZE_CLASSES = "\n    path.append(tuple(min(d, 2) for d in y.shape))"
_CATCHING = """
def R(t):
    try:
        return t.view(2, -1).flip(0).reshape(t.shape)
    except RuntimeError:
        return t * 3
"""
# Statements that slice by k: thunder specializes on k's order to y's length there, an intermediate's.
ORDER_READS = {
    "y = y[:k]": "k <= y.shape[0]",
    "y = y[k:]": "k <= y.shape[0]",
    "y = torch.cat([y[:k], y[k:] * 2], 0)": "k <= y.shape[0]",
    "y = R(y)": "y.shape[0] * y.shape[1] % 2 == 0",  # (whether its view raises)
}


def _recorded(stmt: str, indent: str) -> str:
    """``stmt`` in the instrumented spelling: after the order it reads, if it reads one."""
    read = ORDER_READS.get(stmt)
    return f"{indent}path.append({read})\n{indent}{stmt}" if read else f"{indent}{stmt}"


@st.composite
def statements(draw) -> tuple[str, str]:
    if draw(st.booleans()):
        if draw(st.integers(0, 4)) == 0:
            stmt, read = draw(st.sampled_from(PINNING))
            return f"    {stmt}", f"    path.append({read})\n    {stmt}{SIZE_CLASSES}"
        stmt = draw(st.sampled_from(STRAIGHT))
        return f"    {stmt}", _recorded(stmt, "    ") + SIZE_CLASSES
    if draw(st.booleans()):
        condition = draw(st.sampled_from(BRANCHES)).format(c=draw(st.integers(0, 6)))
        then, other = draw(st.sampled_from(STRAIGHT)), draw(st.sampled_from(STRAIGHT))
        plain = f"    if {condition}:\n        {then}\n    else:\n        {other}"
        branches = f"{_recorded(then, '        ')}\n    else:\n{_recorded(other, '        ')}"
        instrumented = f"    if path.append({condition}) or path[-1]:\n{branches}"
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


@dataclass(frozen=True)
class Extras:
    """The Python values of one call: arguments after ``k``, the global ``G``, ``M.scale``, ``M.gain`` and
    ``M.offset``, the default argument of the global function ``H``, ``C.post``, the environment variable,
    ``O``'s class, ``Narrow.factor``, the number of layers in ``L``, ``V``'s value, ``N``'s and ``S.shift``."""

    n: int | None = None
    mask: bool = False  # a (3,) tensor or None
    sizes: tuple[int, ...] | frozenset | range | bytes = (1,)  # Python reads the last three whole
    sizes_box: str | None = None  # in a deque, an OrderedDict (by index) or a named tuple, read natively
    bias: float | None = None
    key: str | None = None  # one more key of cfg: its name prints with quotes or a backslash in the prologue
    dtype: torch.dtype = torch.float32
    act: str = "relu"
    s: float = 1.0
    color: Color = Color.RED
    g: tuple[float, ...] = (1.0,)
    scale: float | None = None
    gain: float | None = None  # M.gain, missing when None
    default: float | None = None  # H's default argument
    tag: str = "1"
    offset: float | None = None  # M.offset, missing when None
    post: str | None = None  # C.post: None or a torch function's name
    factor: str | None = None  # the environment variable, unset when None
    object_class: str = "Wide"  # O's class
    narrow_factor: float = 0.5  # Narrow.factor
    layers: int = 1  # len(L)
    context: float = 1.0  # V's value
    numpy_factor: float = 0.5  # N's value, a numpy float32
    shift: float | None = None  # S.shift, a buffer: None or a 0-d tensor

    def arguments(self, seed: int) -> tuple:
        mask = torch.randn(3, generator=torch.Generator().manual_seed(seed)) if self.mask else None
        cfg = {"scale": 2.0} if self.bias is None else {"scale": 2.0, "bias": self.bias}
        if self.key is not None:
            cfg[self.key] = 0.0
        sizes = _BOXES[self.sizes_box](self.sizes) if self.sizes_box else self.sizes
        return (self.n, mask, sizes, cfg, self.dtype, getattr(torch, self.act), self.s, self.color, self.tag)

    def set_state(self, namespace) -> None:
        namespace["G"][:] = self.g
        namespace["W"][:] = [0.5]
        namespace["D"].clear()
        namespace["D"]["old"] = 1
        namespace["B"].clear()
        namespace["RECORDS"].clear()
        namespace["Counter"].calls = 0
        for name in ("last", "seen", "total"):
            vars(namespace["M"]).pop(name, None)
        namespace["M"].scale = self.scale
        if self.gain is None:
            vars(namespace["M"]).pop("gain", None)
        else:
            namespace["M"].gain = self.gain
        namespace["H"].__defaults__ = (self.default,)
        if self.offset is None:
            vars(namespace["M"]).pop("offset", None)
        else:
            namespace["M"].offset = self.offset
        namespace["C"].post = None if self.post is None else getattr(torch, self.post)
        if self.factor is None:
            os.environ.pop(ENVIRONMENT_VARIABLE, None)
        else:
            os.environ[ENVIRONMENT_VARIABLE] = self.factor
        namespace["O"] = Wide() if self.object_class == "Wide" else Narrow()
        Narrow.factor = self.narrow_factor
        layers = namespace["L"]
        del layers[self.layers :]  # (the same ModuleList, appended to and cut)
        layers.extend(Step() for _ in range(self.layers - len(layers)))
        namespace["V"].set(self.context)
        namespace["N"] = numpy.float32(self.numpy_factor)
        namespace["S"].shift = None if self.shift is None else torch.tensor(self.shift)

    def python_class(self) -> tuple:
        """What the prologue checks of these values: distinct classes may need distinct programs."""
        return (
            self.n is None, self.mask, _sizes_class(self.sizes, self.sizes_box), self.bias is None, self.key,
            self.dtype, self.act,
            math.copysign(1.0, self.s), math.isnan(self.s), math.isinf(self.s), self.s, self.color,
            self.g, self.scale,  # (G[0], a float global, is pinned by value)
            self.gain, self.default,  # (floats of a global object or function: pinned by value)
            self.tag,
            self.offset, self.post, self.factor,
            self.object_class, self.narrow_factor,  # (a float of a class: pinned by value)
            self.layers, self.context, self.numpy_factor, self.shift is None,
        )  # fmt: skip


def reset_state() -> None:
    """Undo what :meth:`Extras.set_state` leaves outside a program's namespace: the environment variable and the
    class attribute."""
    os.environ.pop(ENVIRONMENT_VARIABLE, None)
    Narrow.factor = 0.5


_SIZES_TUPLES = {n: collections.namedtuple(f"Sizes{n}", [f"d{i}" for i in range(n)]) for n in range(1, 4)}
_BOXES = {
    "deque": collections.deque,
    "OrderedDict": lambda sizes: collections.OrderedDict(enumerate(sizes)),
    "namedtuple": lambda sizes: _SIZES_TUPLES[len(sizes)](*sizes),
}


def _sizes_class(sizes, box: str | None) -> tuple:
    """A tuple's items are checked where they are read; anything Python reads natively is checked whole."""
    return (tuple, len(sizes)) if type(sizes) is tuple and box is None else (type(sizes), box, sizes)


FLOATS = [1.0, 0.0, -0.0, 2.5, float("nan"), float("inf"), float("-inf")]
_SIZES = st.lists(st.integers(0, 4), min_size=1, max_size=3)
EXTRA_VALUES = {
    "n": st.none() | st.integers(0, 5),
    "mask": st.booleans(),
    "sizes": _SIZES.map(tuple) | _SIZES.map(frozenset) | _SIZES.map(bytes) | st.integers(1, 3).map(range),
    "sizes_box": st.sampled_from([None, *_BOXES]),
    "bias": st.none() | st.sampled_from([0.5, -1.0]),
    "key": st.none() | st.sampled_from(["it's", 'say "hi"', "a\\b"]),
    "dtype": st.sampled_from([torch.float32, torch.float64]),
    "act": st.sampled_from(["relu", "tanh", "sigmoid"]),
    "s": st.sampled_from(FLOATS),
    "color": st.sampled_from(list(Color)),
    "g": st.lists(st.sampled_from([1.0, 2.0, -0.5]), min_size=1, max_size=2).map(tuple),
    "scale": st.none() | st.sampled_from([1.5, 3.0]),
    "gain": st.none() | st.sampled_from([0.5, 2.0]),
    "default": st.none() | st.sampled_from([-1.0, 3.0]),
    "tag": st.sampled_from(["1", "2", "10"]),
    "offset": st.none() | st.sampled_from([0.5, 1.5]),
    "post": st.none() | st.sampled_from(["tanh", "sigmoid"]),
    "factor": st.none() | st.sampled_from(["2", "0.5"]),
    "object_class": st.sampled_from(["Wide", "Narrow"]),
    "narrow_factor": st.sampled_from([0.5, 3.0]),
    "layers": st.integers(1, 3),
    "context": st.sampled_from([1.0, 2.0]),
    "numpy_factor": st.sampled_from([0.5, 2.0]),
    "shift": st.none() | st.sampled_from([1.0, -2.0]),
}


@st.composite
def argument_sets(draw) -> list[tuple[int, int, int, Extras]]:
    """3 to 8 (rows, cols, k, extras); rows and k include 0 and 1, where implicit specializations live. From
    one call to the next, one Python value changes with probability 1/2, so programs get reused too."""
    calls, extra = [], draw(st.builds(Extras, **EXTRA_VALUES))
    for _ in range(draw(st.integers(3, 8))):
        if calls and draw(st.booleans()):
            field = draw(st.sampled_from(sorted(EXTRA_VALUES)))
            extra = dataclasses.replace(extra, **{field: draw(EXTRA_VALUES[field])})
        calls.append((draw(st.integers(0, 9)), draw(st.integers(1, 4)), draw(st.integers(0, 7)), extra))
    return calls
