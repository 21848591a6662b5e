"""Reproductions of the papers, one folder each, and the machinery they share.

Shared: `registry` (name -> config, run, figures), `runner` (the run contract around one
experiment), `parallel` (arms x seeds as processes), `mitigations` (the arms' curation and
augmentation settings), `phase` and `phase_figure` (the phase diagram over mixture shares),
`sft` (the `sft` experiment: finetune any HF model with tracking).
One folder per reproduction: `cpi_toy/`, `ocr_toy/`, `inversion_tiny/`, `inversion_injected/`,
`inversion_smollm2/`, `ocr_smollm2/`; each holds its world, model, training, findings and
figures, and `experiment.py` registers it (see `registry`).
"""
