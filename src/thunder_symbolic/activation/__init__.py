"""How the patch set comes to be active: the registry of patches, the version check, the status report and the
environment switches.

Nothing here imports thunder at import time: the start-up hook (``thunder_symbolic_autoload``) reads the
switches in every Python process.
"""
