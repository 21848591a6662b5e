"""Conflict evaluation: scoring items whose context disagrees with (or agrees with) what the
model knows, by generation and by log-likelihood, with the decoding methods and conditions.

The entry point is `knowflow.evaluate` (`evaluation.run.evaluate`); `options` holds its config.
"""
