"""inversion-tiny: the inversion in a small Llama trained from scratch (the flagship, `make demo`).

`world` (the tiny knowledge world: pretraining documents, C / C+S / S finetuning examples,
evaluation sets), `model` (the word-level tokenizer and the tiny Llama), `pretrain` (with the
shipped checkpoints in `tiny-pretrained/`), `track` and `mechanism` (what is measured during
finetuning), `jobs` (one arm x seed), `experiment`, `curves` and `findings` (rise, fall,
verdict), `phase` (the phase diagram over C+S shares), `heads` (the `inversion-tiny-heads`
experiment), `figures`, `curve_figures`, `mechanism_figures`.
"""
