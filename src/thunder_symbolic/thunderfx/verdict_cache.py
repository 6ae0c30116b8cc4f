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
would otherwise add to the cache forever). Any failure to read or write leaves the cache off for the process,
with one ``ThunderSymbolicWarning`` saying why.

The files are data, not trust: each entry is an HMAC under a key of the user's (``thunderfx-verdicts.key``, 32
random bytes, mode 0600), so an entry planted by anyone who cannot read the key is never taken as a verdict. Only
regular files of the user's are opened (no FIFO, device or symlink; opened without blocking), and at most
``MAX_BYTES`` of one are read.

``THUNDER_SYMBOLIC_CACHE_DIR`` chooses the folder (default ``$XDG_CACHE_HOME/thunder-symbolic`` or
``~/.cache/thunder-symbolic``); ``THUNDER_SYMBOLIC_VERDICT_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib
import os
import pathlib
import stat
import sys
import threading
import types
import warnings
from typing import Any

import torch

from thunder_symbolic.activation.environment import switch

__all__ = ["is_known", "remember", "stable_key", "use"]

_HEX = frozenset("0123456789abcdef")
MAX_BYTES = 1 << 22  # (65,536 verdicts: far more than a process meets)
_KEY_BYTES = 32
_KEY_FILE = "thunderfx-verdicts.key"
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
    try:
        fd = _open_regular(store.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(digest + "\n")
    except OSError as e:
        _off(f"{store.path} cannot be written ({e})")
        return
    _use["kept"] += 1


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
    def __init__(self, path: pathlib.Path, secret: bytes, fingerprint: str, known: set[str]):
        self.path, self.secret, self.fingerprint, self.known = path, secret, fingerprint, known
        self.mapping = None  # (size, digest) of thunder's map of torch functions when last read

    def digest(self, key: str) -> str:
        message = f"{self.fingerprint}\n{_mapping_fingerprint(self)}\n{key}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()


_use = {"read": 0, "kept": 0}
_lock = threading.Lock()
_state: dict[str, Any] = {}  # "store": the process's _Store, or None once the cache is off


def _store() -> _Store | None:
    with _lock:
        if "store" not in _state:
            _state["store"] = _open()
        return _state["store"]


def _off(why: str) -> None:
    with _lock:
        _state["store"] = None
    _say_off(why)


def _say_off(why: str) -> None:
    from thunder_symbolic import ThunderSymbolicWarning

    warnings.warn(f"thunderfx's verdict cache is off for this process: {why}", ThunderSymbolicWarning, stacklevel=2)


class _Untrusted(OSError):
    """A cache file that is not a regular file of this user's, or too large."""


def _open_regular(path: pathlib.Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor of ``path`` if it is a regular file of this user's (created with ``mode`` under O_CREAT):
    never through a symlink, never blocking on a FIFO."""
    nofollow = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | nofollow, mode)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise _Untrusted(f"{path} is not a regular file")
        if hasattr(os, "getuid") and found.st_uid != os.getuid():
            raise _Untrusted(f"{path} belongs to another user")
        if found.st_size > MAX_BYTES:
            raise _Untrusted(f"{path} is larger than {MAX_BYTES} bytes")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(path: pathlib.Path) -> bytes:
    """At most MAX_BYTES of ``path`` (a regular file of this user's), or b"" when there is none."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as f:
        if os.utime in os.supports_fd:
            os.utime(f.fileno())  # used now: the last to be removed
        return f.read(MAX_BYTES)


def _secret(where: pathlib.Path) -> bytes:
    """The user's key for the verdicts' HMACs: read, or made (atomically: another process may be making it)."""
    path = where / _KEY_FILE
    try:
        fd = _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(_KEY_BYTES))
    fd = _open_regular(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise _Untrusted(f"{path} can be read or written by others (mode 0600 expected)")
        secret = f.read(_KEY_BYTES + 1)
    if len(secret) != _KEY_BYTES:
        raise _Untrusted(f"{path} is not a key of {_KEY_BYTES} bytes")  # (one being written: next process)
    return secret


_KEPT_VERSIONS = 4
_FILES = "thunderfx-verdicts*.txt"  # (before one file per set of versions: thunderfx-verdicts.txt)


def _open() -> _Store | None:
    if not switch("THUNDER_SYMBOLIC_VERDICT_CACHE"):
        return None  # (read as THUNDER_SYMBOLIC is)
    try:
        where = _folder()
        where.mkdir(parents=True, exist_ok=True)
        secret = _secret(where)
        fingerprint = _fingerprint()
        path = where / f"thunderfx-verdicts-{fingerprint[:16]}.txt"
        lines = _read(path).decode("ascii", errors="replace").split()
        known = {line for line in lines if len(line) == 64 and set(line) <= _HEX}
        _remove_old_versions(where, path)
        return _Store(path, secret, fingerprint, known)
    except OSError as e:
        _say_off(str(e))
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
