"""Training loops: toy theory models, pretraining and SFT of language models."""
