"""``python -m thunder_symbolic``: print the versions, whether the patch set is active, and every patch."""

import thunder_symbolic

print(thunder_symbolic.status())
