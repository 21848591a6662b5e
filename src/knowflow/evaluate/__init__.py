"""Scoring of knowledge conflicts: generation presence, log-likelihood choice, metrics.

The public function is `knowflow.evaluate` (defined in `knowflow.evaluate.api`); it stays that
function after this package is imported (see knowflow/__init__.py).
"""
