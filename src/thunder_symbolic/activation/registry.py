"""The patch registry: every change this package makes to thunder is a :class:`Patch` listed here.

A patch names its upstream target (``"module:attribute"``, ``"module:Class.attribute"``, for one of
thunder's symbols ``"module:symbol.meta"``, or through a table, ``"module:ex.opmap[name].meta"``), what it
changes, why, and the upstream issue or pull request it concerns. Applying a patch replaces the target
*and every other module-level binding of the same object*: thunder modules bind names with
``from ... import ...``, so setting the attribute on its home module alone would leave stale copies
behind. Patches whose module is not imported yet are applied by a post-import hook when it is (or when
the module named by ``after`` is, for a target that another module's import fills in).

Applying is all or nothing: a patch that cannot apply (its target missing, its factory raising, the module of
a later patch not found) reverts every patch already applied and raises :class:`PatchError` naming it, so
thunder is never left half-patched. A failure at a later module's import reverts too, and is handed to the
callback given to :func:`apply_all` (a post-import hook must not break the user's import).

A few changes cannot wait for the import: on newer torch, thunder's modules fail *while they execute*
(a table naming a torch method that was removed). An :class:`ImportPatch` is a context manager that
surrounds the execution of one thunder module: :func:`install_import_patches` puts a meta-path finder
first that hands such a module a loader running the patch around the module's own code. It must be
installed before ``thunder`` is imported (``thunder_symbolic.apply`` does it first;
``thunder_symbolic_autoload`` does it just before thunder's own code runs), so import patches live in
modules that import torch only (:mod:`thunder_symbolic.import_patches`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, is_dataclass
from typing import Any

import wrapt

__all__ = [
    "AppliedPatch",
    "ImportPatch",
    "Patch",
    "PatchError",
    "applied_patches",
    "apply_all",
    "import_patch",
    "install_import_patches",
    "patch",
    "registered_import_patches",
    "registered_patches",
    "revert_all",
]


@dataclass(frozen=True)
class Patch:
    """One change to thunder. ``make(original)`` returns the object that takes the original's place."""

    target: str
    summary: str
    why: str
    upstream: str
    make: Callable[[Any], Any]
    replaces: bool = False  # True: the original is not called any more (its docstring says why)
    adds: bool = False  # True: the target does not exist upstream (make receives None; revert deletes it)
    requires: str = ""  # what the target module needs to be importable at all, when not every machine has it
    available: Callable[[], bool] | None = None  # whether this process has it
    after: str = ""  # a module whose import creates the target (applied when both are imported)
    rebinds: bool = True  # False: the target binding alone changes (other modules hold the original for their use)

    def is_available(self) -> bool:
        return self.available is None or self.available()

    @property
    def module_name(self) -> str:
        return self.target.partition(":")[0]

    @property
    def trigger_module(self) -> str:
        """The module whose import applies the patch."""
        return self.after or self.module_name

    @property
    def attribute_path(self) -> list[str]:
        return self.target.partition(":")[2].split(".")

    @property
    def defined_in(self) -> str:
        return self.make.__module__


@dataclass
class AppliedPatch:
    patch: Patch
    owner: Any
    attribute: str
    original: Any
    replacement: Any
    holders: list[tuple[Any, str]] = field(default_factory=list)  # (module, name) bindings also replaced


class PatchError(RuntimeError):
    """A patch could not be applied; every patch applied before it has been reverted."""

    def __init__(self, target: str, error: BaseException | str):
        detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(f"the patch of {target} could not be applied ({detail})")
        self.target = target


_registry: list[Patch] = []
_applied: list[AppliedPatch] = []
_pending: set[str] = set()  # module names whose patches wait for their import
_hooked: set[str] = set()  # module names with a post-import hook installed
_active = False
_on_later_failure: Callable[[PatchError], None] | None = None


def patch(
    target: str,
    *,
    summary: str,
    why: str,
    upstream: str = "",
    replaces: bool = False,
    requires: str = "",
    available: Callable[[], bool] | None = None,
    adds: bool = False,
    after: str = "",
    rebinds: bool = True,
):
    """Register the decorated factory ``make(original) -> replacement`` as the patch of ``target``.

    ``requires``/``available`` describe a target module that only some machines can import (nvFuser's
    executor needs a GPU): its patch waits for the import like any other, and the status report says why
    it never comes. ``after`` names the module whose import creates the target, when that is not the
    target's module (thunder.torch registers the torch executor's operators of its fallback ops).
    ``rebinds=False`` leaves the other bindings of the original alone: a module that one thunder module sees
    through a patched view (the interpreter's ``dis``) stays itself everywhere else.
    """
    if target.count(":") != 1:
        raise ValueError(f"patch target must be 'module:attribute', got {target!r}")

    def register(make: Callable[[Any], Any]) -> Callable[[Any], Any]:
        if any(p.target == target for p in _registry):
            raise ValueError(f"{target} is patched twice")
        _registry.append(
            Patch(target, summary, why, upstream, make, replaces, adds, requires, available, after, rebinds)
        )
        return make

    return register


def registered_patches() -> tuple[Patch, ...]:
    return tuple(_registry)


def applied_patches() -> tuple[AppliedPatch, ...]:
    return tuple(_applied)


def pending_modules() -> frozenset[str]:
    return frozenset(_pending)


def _resolve_owner(p: Patch, module: Any) -> tuple[Any, str]:
    owner = module
    *path, attribute = p.attribute_path
    for name in path:
        name, _, key = name.partition("[")
        owner = getattr(owner, name)
        if key:
            owner = owner[key.removesuffix("]")]
    return owner, attribute


def _raw_attribute(owner: Any, attribute: str) -> Any:
    # Class attributes are read from __dict__ so that staticmethod/classmethod wrappers survive a revert.
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attribute in vars(klass):
                return vars(klass)[attribute]
    return getattr(owner, attribute)


def _set(owner: Any, attribute: str, value: Any) -> None:
    """``setattr``, also on a frozen dataclass instance: thunder's Symbols are frozen, and a patch of
    ``"thunder.torch:chunk.meta"`` replaces what one symbol computes while every table keeps the symbol."""
    if is_dataclass(owner) and not isinstance(owner, type):
        object.__setattr__(owner, attribute, value)
    else:
        setattr(owner, attribute, value)


def _holds_any(module: Any, ids) -> bool:
    """Whether a global of ``module`` has one of ``ids``: a C-level test (``isdisjoint``), for thousands of modules."""
    namespace = getattr(module, "__dict__", None)
    return isinstance(namespace, dict) and not ids.isdisjoint(map(id, list(namespace.values())))


def _module_holders(originals: dict[int, AppliedPatch], modules: list[Any]) -> None:
    """Find every global of ``modules`` that is one of ``originals``."""
    for module in modules:
        if not _holds_any(module, originals.keys()):
            continue
        for name, value in list(module.__dict__.items()):
            applied = originals.get(id(value))
            if applied is not None and value is applied.original and module is not applied.owner:
                applied.holders.append((module, name))


class _Readers:
    """The modules that can hold the originals of the patches ``apply_all`` applies to modules already imported:
    those holding one now, found in one read (None: every module), and the modules imported since. Reading every
    module for each of the patched modules cost ``import thunder`` a second in a process that had imported
    torch and transformers."""

    def __init__(self, originals: set[int] | None):
        self._known = len(sys.modules)
        modules = list(sys.modules.values())
        self._modules = modules if originals is None else [m for m in modules if _holds_any(m, originals)]

    def modules(self) -> list[Any]:
        return self._modules + list(sys.modules.values())[self._known :]


def _apply_one(p: Patch) -> AppliedPatch:
    owner, attribute = _resolve_owner(p, sys.modules[p.module_name])
    if p.adds:
        if hasattr(owner, attribute):
            raise RuntimeError(f"{p.target} exists upstream now: the patch that adds it must become a wrapper")
        original = None
    else:
        original = _raw_attribute(owner, attribute)
    replacement = p.make(original)
    _set(owner, attribute, replacement)
    return AppliedPatch(p, owner, attribute, original, replacement)


def _apply_module(module_name: str, readers: _Readers | None = None) -> None:
    """Apply the patches that ``module_name``'s import triggers, and rebind their originals' holders among
    ``readers``' modules (by default, at the module's import: every module)."""
    fresh: dict[int, AppliedPatch] = {}
    for p in _registry:
        if p.trigger_module != module_name:
            continue
        try:
            applied = _apply_one(p)
        except Exception as e:
            raise PatchError(p.target, e) from e
        _applied.append(applied)
        if not isinstance(applied.owner, type) and not p.adds and p.rebinds:
            fresh[id(applied.original)] = applied
    _module_holders(fresh, readers.modules() if readers else list(sys.modules.values()))
    for applied in fresh.values():
        for holder, name in applied.holders:
            setattr(holder, name, applied.replacement)
    _pending.discard(module_name)


def _on_import(module: Any) -> None:
    if _active and module.__name__ in _pending:
        try:
            _apply_module(module.__name__)
        except Exception as e:
            revert_all()
            if _on_later_failure is not None:
                _on_later_failure(e if isinstance(e, PatchError) else PatchError(module.__name__, e))


def _module_exists(module_name: str) -> bool:
    """Whether ``module_name`` can be found, importing nothing: found from its nearest imported package down
    (``importlib.util.find_spec`` would import ``thunder.dynamo``, and with it torch._dynamo, to find
    ``thunder.dynamo.utils``)."""
    parts = module_name.split(".")
    known = next((i for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in sys.modules), 0)
    folders = getattr(sys.modules[".".join(parts[:known])], "__path__", None) if known else None
    for i in range(known, len(parts)):
        if i > 0 and folders is None:  # (a module that is no package has no submodules)
            return False
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), folders)
        if spec is None:
            return False
        folders = spec.submodule_search_locations
    return True


def _current_originals(imported: set[str]) -> set[int] | None:
    """The ids of what the patches of the ``imported`` modules will replace; None (read every module) where
    one cannot be read yet (its patch will say why when applied)."""
    ids = set()
    for p in _registry:
        if p.trigger_module in imported and not p.adds and p.rebinds:
            try:
                owner, attribute = _resolve_owner(p, sys.modules[p.module_name])
                ids.add(id(_raw_attribute(owner, attribute)))
            except (AttributeError, KeyError):
                return None
    return ids


def apply_all(on_later_failure: Callable[[PatchError], None] | None = None) -> None:
    """Apply every registered patch; those of modules not imported yet are applied on their import.

    All or nothing: raises :class:`PatchError` with nothing applied when a patch cannot apply, or when a
    module a later patch waits for cannot be found. A patch that fails at its module's later import reverts
    every patch and calls ``on_later_failure`` with the error."""
    global _active, _on_later_failure
    if _active:
        return
    names = list(dict.fromkeys(p.trigger_module for p in _registry))
    for p in _registry:
        if p.trigger_module not in sys.modules and p.is_available() and not _module_exists(p.trigger_module):
            raise PatchError(p.target, f"module {p.trigger_module} not found")
    _active, _on_later_failure = True, on_later_failure
    try:
        readers = _Readers(originals=_current_originals({name for name in names if name in sys.modules}))
        for module_name in names:
            _pending.add(module_name)
            if module_name in sys.modules:
                _apply_module(module_name, readers)
            elif module_name not in _hooked:
                _hooked.add(module_name)
                wrapt.register_post_import_hook(_on_import, module_name)
    except BaseException:
        revert_all()
        raise


def revert_all() -> None:
    """Restore every original, holders included, in the reverse order of application."""
    global _active
    for applied in reversed(_applied):
        if applied.patch.adds:
            delattr(applied.owner, applied.attribute)
            continue
        _set(applied.owner, applied.attribute, applied.original)
        for holder, name in applied.holders:
            if getattr(holder, name, None) is applied.replacement:
                setattr(holder, name, applied.original)
    _applied.clear()
    _pending.clear()
    _active = False


def is_active() -> bool:
    return _active


def import_target_modules() -> None:
    """Import every module a patch targets that this process can import (the tests use it to check that
    no stale binding is left)."""
    for module_name in dict.fromkeys(p.trigger_module for p in _registry if p.is_available()):
        importlib.import_module(module_name)


@dataclass(frozen=True)
class ImportPatch:
    """A change made while one thunder module executes: ``around()`` is a context manager entered before
    the module's code runs and left after it (given the module), for this torch only when ``needed()``."""

    module_name: str
    summary: str
    why: str
    upstream: str
    around: Callable[[], contextlib.AbstractContextManager]
    needed: Callable[[], bool]

    @property
    def target(self) -> str:
        return f"{self.module_name} (while it is imported)"

    @property
    def defined_in(self) -> str:
        return self.around.__module__


_import_patches: list[ImportPatch] = []
_import_patched: set[str] = set()  # module names whose import ran their patches


def import_patch(module_name: str, *, summary: str, why: str, needed: Callable[[], bool], upstream: str = ""):
    """Register the decorated context-manager factory to surround the execution of ``module_name``.

    The factory's context manager yields a callable that receives the executed module (to tidy up
    what was put in place for it)."""

    def register(around: Callable[[], contextlib.AbstractContextManager]):
        if any(p.module_name == module_name for p in _import_patches):
            raise ValueError(f"{module_name} has an import patch already")
        _import_patches.append(ImportPatch(module_name, summary, why, upstream, around, needed))
        return around

    return register


def registered_import_patches() -> tuple[ImportPatch, ...]:
    return tuple(_import_patches)


def import_patched(module_name: str) -> bool:
    """Whether ``module_name``'s import ran its import patch in this process."""
    return module_name in _import_patched


class _PatchedLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, import_patch_: ImportPatch):
        self._loader = loader
        self._patch = import_patch_

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        with self._patch.around() as finish:
            self._loader.exec_module(module)
            finish(module)
        _import_patched.add(module.__name__)

    def __getattr__(self, name):  # resource readers and the like are the original loader's
        return getattr(self._loader, name)


class _ImportPatchFinder(importlib.abc.MetaPathFinder):
    """Finds a module with a needed import patch through the other finders and wraps its loader."""

    def find_spec(self, name, path=None, target=None):
        found = next((p for p in _import_patches if p.module_name == name and p.needed()), None)
        if found is None:
            return None
        others = [finder for finder in sys.meta_path if finder is not self]
        spec = next(
            (s for finder in others if (s := getattr(finder, "find_spec", lambda *a: None)(name, path, target))),
            None,
        )
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchedLoader(spec.loader, found)
        return spec


_finder = _ImportPatchFinder()


def install_import_patches() -> list[str]:
    """Put the import-patch finder first on ``sys.meta_path`` (once). Returns the modules with a needed
    import patch that were imported before it, unpatched: their import has failed or will misbehave."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    return [
        p.module_name
        for p in _import_patches
        if p.needed() and p.module_name in sys.modules and p.module_name not in _import_patched
    ]
