"""Python and library semantics in traced code, kept under symbolic values.

- what traced code's calls become: the lookaside table (``lookasides``), torch's calling conventions where
  thunder's operators differ (``operator_adapters``), tensors' and modules' calls (``tensor_methods``,
  ``module_calls``, ``opaque``);
- what it learns when it looks at a value (``introspection``);
- numbers and sizes (``number_ops``, ``numpy_numbers``, ``sizes``, ``subscripts``);
- operators 0.2.6 lacks or pins (``torch_composites``, ``fallback_shapes``), transformers' masks (``hf_masks``);
- the side effects it makes on state it did not create: their recording (``stores``) and replay
  (``side_effects``).
"""
