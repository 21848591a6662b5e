"""One answer's provenance: did it come from the context or from the weights (source), from
which sentence (attribution by ablation and by one pass), and through which layers and heads
(attention knockout). `knowflow.explain` (explain.api.explain) is the entry point; import
from the submodules (`from knowflow.explain.api import explain`), since the package attribute
`knowflow.explain` is the function.
"""
