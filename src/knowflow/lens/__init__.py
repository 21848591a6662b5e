"""The model-access layer below evaluation, probes and explanation: loading (`load`: hub ids,
local folders, GGUF, LoRA adapters), the architecture map (`arch`), named hook points
(`hooks`, `heads`), batching and padding (`batching`) and model adaptation (`adapt`).
"""
