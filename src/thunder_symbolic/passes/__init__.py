"""Passes over a trace before its executors run, which make fewer operations without changing a value: conversions
that torch answers with the tensor itself are removed (``conversions``)."""
