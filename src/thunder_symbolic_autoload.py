"""Imported at interpreter start-up by ``thunder_symbolic.pth``: arranges for the patch set to be
applied as soon as ``thunder`` is imported, in any process (torchrun workers included).

Kept tiny and free of heavy imports, because every Python process of this environment runs it.
``THUNDER_SYMBOLIC=0`` turns activation off.
"""

import os
import sys


class _TorchVersionCheck:
    """Meta-path finder that only looks: before thunder's first import, warn when the installed torch
    is one lightning-thunder 0.2.6 cannot import with, since its own error comes from deep inside."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "thunder":
            return
        sys.meta_path.remove(_TorchVersionCheck)
        from importlib.metadata import PackageNotFoundError, version

        try:
            major, minor = (int(part) for part in version("torch").split(".")[:2])
        except (PackageNotFoundError, ValueError):
            return
        if (major, minor) >= (2, 13):
            import warnings

            warnings.warn(
                f"lightning-thunder 0.2.6 does not import on torch {version('torch')} (torch >= 2.13 removed "
                "named-tensor methods); thunder-symbolic supports torch>=2.9,<2.10.",
                stacklevel=2,
            )
        return


if os.environ.get("THUNDER_SYMBOLIC", "1").strip().lower() not in ("0", "false", "no", "off"):
    import wrapt

    def _apply_on_import(_thunder_module):
        import thunder_symbolic  # noqa: F401  (importing the package applies the patch set)

    sys.meta_path.insert(0, _TorchVersionCheck)
    wrapt.register_post_import_hook(_apply_on_import, "thunder")
