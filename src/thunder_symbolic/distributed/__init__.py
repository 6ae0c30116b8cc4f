"""DTensor and tensor parallelism: DTensor operations' symbolic shapes (``dtensor_shapes``), gradients
(``dtensor_grads``), their local forms (``dtensor_local``) with small sums through shared memory
(``shared_sums``), a DTensor ``silu`` (``dtensor_silu``), the state of a DTensor program (``dtensor_state``) and
the memo of their meta functions' fake runs (``fake_runs``).
"""
