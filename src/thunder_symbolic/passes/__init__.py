"""Passes over a trace before its executors run, which make fewer operations without changing a value: conversions
that torch answers with the tensor itself are removed (``conversions``), and sizes read from computed tensors are
computed from the inputs' sizes, size arithmetic first, so that fusions are not cut at them (``size_reads``)."""
