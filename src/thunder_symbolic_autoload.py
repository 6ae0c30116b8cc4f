"""Imported at interpreter start-up by ``thunder_symbolic.pth``: arranges for the patch set to be
applied when ``thunder`` is imported, in any process (torchrun workers included).

Activation has two halves around thunder's own code: before it runs, ``thunder_symbolic.prepare()``
checks the versions and installs the import patches (changes thunder's modules need while they
execute on newer torch); after it, ``thunder_symbolic.apply()`` patches thunder's functions. A
meta-path finder gives thunder a loader that does exactly that.

Kept tiny and free of heavy imports, because every Python process of this environment runs it.
``THUNDER_SYMBOLIC=0`` turns the patch set off; the import patches stay (thunder 0.2.6 does not import
on torch >= 2.13 without them, and they change none of its behaviour).
"""

import importlib.abc
import importlib.util
import sys
import warnings


class _ActivatingLoader(importlib.abc.Loader):
    """thunder's own loader, with the patch set prepared before its code runs and applied after."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        import thunder_symbolic  # thunder is being imported: importing the package does not apply it

        enabled = thunder_symbolic.enabled_by_environment() and thunder_symbolic.prepare()
        if not enabled:  # the import patches all the same: they change no behaviour, and thunder needs them
            try:
                thunder_symbolic.install_import_patches()
            except Exception as e:  # thunder's import goes on, as upstream's (unless prepare said why already)
                if thunder_symbolic.refused_reason() is None:
                    warnings.warn(
                        f"thunder-symbolic: its import patches failed: {e!r}", thunder_symbolic.ThunderSymbolicWarning
                    )
        self._loader.exec_module(module)
        if enabled:
            thunder_symbolic.apply()

    def __getattr__(self, name):  # resource readers and the like are the original loader's
        return getattr(self._loader, name)


class _ThunderFinder(importlib.abc.MetaPathFinder):
    """Finds ``thunder`` through the other finders, once, and hands it the activating loader."""

    def find_spec(self, name, path=None, target=None):
        if name != "thunder":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ActivatingLoader(spec.loader)
        return spec


sys.meta_path.insert(0, _ThunderFinder())
