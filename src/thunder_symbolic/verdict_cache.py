"""thunderfx's verdicts "thunder runs this kind of node" kept across processes, as Inductor keeps its FX graphs.

thunderfx's splitter decides, for each node of a Dynamo graph, whether thunder runs it, by running the node's
thunder symbol on proxies of its inputs. The patch of ``is_node_supported_by_thunder`` computes that once per kind
of node in a process (the operation, its constants, and its inputs' kinds, shapes, dtypes, devices and DTensor
layouts); a process's first graph still computes every kind: 110 for the inference benchmark's prefill, about
0.3 s of its first token. Kinds found supported are written here, and a later process with the same thunder,
torch, Python, thunder-symbolic and mapping of torch functions to thunder reads them instead of computing them.

Only "supported" is kept, and only for an operation named the same in every process (a torch operation, a
function or method of torch or the standard library): a wrong entry could only split a graph or make its
compile fail, never change what a program computes. Entries are hashes, one per line, appended by each process
(lines shorter than a pipe's atomic write, so concurrent ranks do not interleave them), in one file per set of
versions: a process keeps the files of the last four sets used (by the time a file was last written or
opened) and removes the others, which no process like it reads again (a machine that updates its packages
would otherwise add to the cache forever). Any failure to read or write leaves the cache off for the process.

``THUNDER_SYMBOLIC_CACHE_DIR`` chooses the folder (default ``$XDG_CACHE_HOME/thunder-symbolic`` or
``~/.cache/thunder-symbolic``); ``THUNDER_SYMBOLIC_VERDICT_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import pathlib
import sys
import threading
import types
from typing import Any

import torch

from thunder_symbolic._environment import switch

__all__ = ["is_known", "remember", "stable_key", "use"]

_HEX = frozenset("0123456789abcdef")
_LIBRARIES = frozenset({"torch", "_operator", "operator", "builtins", "math"})


class _Unstable(Exception):
    """A part of a node's kind that has no name shared by every process."""


def _folder() -> pathlib.Path:
    chosen = os.environ.get("THUNDER_SYMBOLIC_CACHE_DIR")
    if chosen:
        return pathlib.Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "thunder-symbolic"


def stable_key(kind: tuple) -> str | None:
    """``kind`` (see the dynamo_utils patch's ``_node_kind``) as text every process writes the same way, or None
    when a part of it has no such text (a local function, a lambda, an object of the user's)."""
    op, target, arguments, defaults = kind
    try:
        if op == "call_method" and type(target) is str:
            named = f"method {target}"
        elif op == "call_function":
            named = _operation_name(target)
        else:
            return None
        return f"{named}|{_text(arguments)}|{_text(defaults)}"
    except _Unstable:
        return None


def is_known(key: str) -> bool:
    """Whether a process like this one found the kind with this key supported."""
    store = _store()
    known = store is not None and store.digest(key) in store.known
    _use["read"] += known
    return known


def remember(key: str) -> None:
    """Record that the kind with this key is supported."""
    store = _store()
    if store is None:
        return
    digest = store.digest(key)
    if digest in store.known:
        return
    store.known.add(digest)
    _use["kept"] += 1
    try:
        with open(store.path, "a", encoding="ascii") as f:
            f.write(digest + "\n")
    except OSError:
        _off()


def use() -> dict[str, int]:
    """How many verdicts this process read from the cache, and how many it kept there."""
    return dict(_use)


def _operation_name(target: Any) -> str:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op {target}"
    return f"function {_library_name(target)}"


def _library_name(obj: Any) -> str:
    """``module.name`` of a function or class of a library, checked to lead back to ``obj``: by its qualified name,
    or its name for a builtin whose qualified name is its C class's (torch.cos is ``_VariableFunctionsClass.cos``)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or module.partition(".")[0] not in _LIBRARIES:
        raise _Unstable
    for name in (getattr(obj, "__qualname__", None), getattr(obj, "__name__", None)):
        if isinstance(name, str) and _resolved(module, name) is obj:
            return f"{module}.{name}"
    raise _Unstable


def _resolved(module: str, name: str) -> Any:
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(map(_text, value)) + ")"
    if isinstance(value, type):
        return _type_name(value)
    if value is None or type(value) in (bool, int, float, complex, str, types.EllipsisType):
        return f"{type(value).__name__}:{value!r}"
    if type(value) is slice:  # (its bounds by value: a node or a symbolic size in it has no such text)
        return f"slice{_text((value.start, value.stop, value.step))}"
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return f"{type(value).__name__}:{value}"
    if not torch.distributed.is_available():
        raise _Unstable
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    if isinstance(value, DeviceMesh):
        return f"mesh:{value.device_type}:{value.mesh.tolist()}:{value.mesh_dim_names}"
    if isinstance(value, Placement):
        return f"placement:{value!r}"
    raise _Unstable


def _type_name(cls: type) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return _library_name(cls)


class _Store:
    def __init__(self, path: pathlib.Path, fingerprint: str, known: set[str]):
        self.path, self.fingerprint, self.known = path, fingerprint, known
        self.mapping = None  # (size, digest) of thunder's map of torch functions when last read

    def digest(self, key: str) -> str:
        return hashlib.sha256(f"{self.fingerprint}\n{_mapping_fingerprint(self)}\n{key}".encode()).hexdigest()


_use = {"read": 0, "kept": 0}
_lock = threading.Lock()
_state: dict[str, Any] = {}  # "store": the process's _Store, or None once the cache is off


def _store() -> _Store | None:
    with _lock:
        if "store" not in _state:
            _state["store"] = _open()
        return _state["store"]


def _off() -> None:
    with _lock:
        _state["store"] = None


_KEPT_VERSIONS = 4
_FILES = "thunderfx-verdicts*.txt"  # (before one file per set of versions: thunderfx-verdicts.txt)


def _open() -> _Store | None:
    if not switch("THUNDER_SYMBOLIC_VERDICT_CACHE"):
        return None  # (read as THUNDER_SYMBOLIC is)
    try:
        where = _folder()
        where.mkdir(parents=True, exist_ok=True)
        fingerprint = _fingerprint()
        path = where / f"thunderfx-verdicts-{fingerprint[:16]}.txt"
        known = set()
        if path.exists():
            with open(path, encoding="ascii", errors="replace") as f:
                known = {line for line in map(str.strip, f) if len(line) == 64 and set(line) <= _HEX}
            path.touch()  # used now: the last to be removed
        _remove_old_versions(where, path)
        return _Store(path, fingerprint, known)
    except OSError:
        return None


def _remove_old_versions(where: pathlib.Path, own: pathlib.Path) -> None:
    """Remove the files of all but the sets of versions used last (another process may be removing them too)."""
    others = []
    for path in where.glob(_FILES):
        if path != own:
            with contextlib.suppress(OSError):  # removed meanwhile
                others.append((path.stat().st_mtime, path))
    for _, path in sorted(others, reverse=True)[_KEPT_VERSIONS - 1 :]:
        with contextlib.suppress(OSError):  # a file this process cannot remove stays
            path.unlink()


def _fingerprint() -> str:
    """The versions and the code a verdict depends on: thunder's and this package's files by size and time."""
    import thunder
    import thunder_symbolic

    parts = [sys.version, torch.__version__, getattr(thunder, "__version__", ""), thunder_symbolic.__version__]
    for package in (thunder, thunder_symbolic):
        root = os.path.dirname(package.__file__)
        for directory, subdirectories, files in os.walk(root):
            subdirectories.sort()
            for name in sorted(n for n in files if n.endswith(".py")):
                stat = os.stat(os.path.join(directory, name))
                parts.append(f"{directory[len(root) :]}/{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _mapping_fingerprint(store: _Store) -> str:
    """thunder's map of torch functions to its own, which a program can extend (a custom op): by its size and
    names, read again when its size changes."""
    from thunder.torch import _torch_to_thunder_function_map as mapping

    if store.mapping is None or store.mapping[0] != len(mapping):
        names = sorted(f"{getattr(k, '__module__', '')}.{getattr(k, '__qualname__', k)}" for k in mapping)
        store.mapping = (len(mapping), hashlib.sha256("\n".join(names).encode()).hexdigest())
    return store.mapping[1]
