"""ocr-toy: out-of-context reasoning in a one-layer attention model (Huang et al. 2025).

`world` (facts and implications over subjects), `model` (factorized W_O W_V^T vs merged
W_OV), `train`, `experiment` (the four studies and their verdict), `figures`.
"""
