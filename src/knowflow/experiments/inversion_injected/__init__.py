"""inversion-injected: the inversion after injecting made-up facts into a pretrained model.

`world` (made-up subjects and their facts, known or unknown to the model), `jobs` (stage 1:
plain-text injection; stage 2: C / C+S / S instruction finetuning per arm), `experiment`
(arms x seeds x memory strengths, findings), `figures`.
"""
