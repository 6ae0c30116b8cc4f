"""What makes a cached program's reuse sound: the checks its prologue makes.

``algebra`` (symbolic numbers as sympy expressions over the inputs), ``recorder`` (every concrete read of a
symbolic number while tracing), ``values`` (checks of the Python values a trace read), ``refusals`` (what cannot
be checked), ``backward_watch`` (what building a backward reads of sizes), ``prologue`` and
``compiled_prologue`` (the checks as one function).
"""
