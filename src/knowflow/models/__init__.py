"""Models: one-layer theory models and loaders for HF causal LMs."""
