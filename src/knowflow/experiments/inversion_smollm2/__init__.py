"""inversion-smollm2: reliance during SmolLM2-135M finetuning and its mitigations (`experiment`).
"""
