"""cpi-toy: context-parametric inversion in the one-layer theory model (Goyal et al., ICLR 2025).

`world` (subjects, relations, C / C+S / S examples as token ids), `model` (the one-layer
attention model of the paper's theory), `train` (full-batch gradient descent with the
attention tracked), `experiment` (the five parts and their verdict), `figures`.
"""
