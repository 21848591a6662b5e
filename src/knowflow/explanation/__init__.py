"""One answer's provenance: did it come from the context or from the weights (`source`), from
which sentence (`attribution`: ablation, `trie`, `surrogate`), and through which layers and
heads (`mechanism`: attention knockout). The entry point is `knowflow.explain`
(`explanation.run.explain`); `options` holds its config.
"""
