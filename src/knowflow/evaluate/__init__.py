"""Scoring of knowledge conflicts: generation presence, log-likelihood choice, metrics.

`knowflow.evaluate(model, suites, ...)` is `knowflow.evaluate.api.evaluate`. Because this
package shares the name, the package itself is made callable: once it is imported,
`knowflow.evaluate` is this module, and calling it calls `api.evaluate`.
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from knowflow.evaluate.api import evaluate

        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
