"""Python and library semantics in traced code, kept under symbolic values.

Numbers and sizes (``number_ops``, ``numpy_numbers``, ``sizes``, ``subscripts``), tensors' and modules' calls
(``tensor_methods``, ``module_calls``, ``opaque``), operators 0.2.6 lacks or pins (``torch_composites``,
``fallback_shapes``), transformers' masks (``hf_masks``) and the replay of the side effects traced code makes on
state it did not create (``side_effects``).
"""
