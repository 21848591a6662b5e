"""ocr-smollm2: out-of-context reasoning in SmolLM2 on made-up people (`experiment`, `figures`;
the people world is `knowflow.data.people`).
"""
