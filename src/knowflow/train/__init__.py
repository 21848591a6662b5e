"""Finetuning: one path through the HF Trainer (`sft`, `sft_job`), the context-reliance
tracker callback (`tracker`, `callback`, `reliance_pass`), and curation (`criticality`:
static filtering by no-context loss; `curation`: dynamic curation during training;
`augment`: counterfactual augmentation).
"""
