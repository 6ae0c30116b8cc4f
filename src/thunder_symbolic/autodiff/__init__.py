"""Gradients with symbolic sizes: the registered rules (``grad_rules``), which rules hold for complex tensors
(``complex_grads``) and 0-d tensors used as numbers (``scalar_grads``), fallback operations' gradients
(``fallback_grads``), whether thunder is choosing an operation's gradient (``gradient_choice``), and how a custom
``autograd.Function`` reaches thunder (``autograd_apply``).
"""
