"""Vocabulary projection and attention mass against references."""

from __future__ import annotations

import pytest
import torch

from helpers import SHARP, byte_bpe, tiny_gpt2
from knowflow.errors import KnowflowError
from knowflow.probes.examples import ProbeExample
from knowflow.probes.mass import attention_mass, mean_attention_mass
from knowflow.probes.projection import (
    ProjectionConfig,
    attribute_words,
    is_attribute_token,
    project,
    projection,
    summarize_projection,
)

FACTS = [ProbeExample(prompt="The capital of France is", subject="France",
                      attributes=("Paris", "French", "Europe", "the Seine")),
         ProbeExample(prompt="The Eiffel Tower is located in the city of",
                      subject="The Eiffel Tower", attributes=("Paris", "iron tower"))]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@torch.no_grad()
def test_last_layer_projection_is_the_model_output(make_tiny_llama, family):
    """The logit lens of the last block's output, through the final norm, is the model's own
    next-token distribution, so the top token matches the prediction for every example."""
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=4, **SHARP) if family == "llama" else tiny_gpt2(tok)
    records = projection(model, tok, FACTS, ProjectionConfig(top_k=5, known_only=False))
    n_layers = model.config.num_hidden_layers
    assert len(records) == len(FACTS) * n_layers
    assert all(r["hidden_matches"] for r in records if r["layer"] == n_layers - 1)
    summary = summarize_projection(records)
    assert summary["extraction_rate"]["hidden"][-1] == 1.0
    assert len(summary["extraction_rate"]["attn"]) == n_layers
    rates = [r["attr_rate_subject"] for r in records]
    assert all(0.0 <= v <= 1.0 for v in rates)
    ids = torch.tensor([tok(FACTS[0].prompt)["input_ids"]])
    out = model(ids, output_hidden_states=True)
    # hidden_states[0] is the embedding output, before any norm: project() normalizes it
    torch.testing.assert_close(project(model, out.hidden_states[0], final_norm=False),
                               model.get_output_embeddings()(out.hidden_states[0]))


def test_attribute_tokens():
    words = attribute_words(FACTS[1])
    assert "paris" in words and "tower" not in words and "the" not in words  # subject, stop
    assert is_attribute_token(" Paris", words) and is_attribute_token("Par", words)
    assert is_attribute_token(" iron", words)
    assert not is_attribute_token(" Pa", words)  # prefixes need three letters
    assert not is_attribute_token(" the", words) and not is_attribute_token(",", words)


@torch.no_grad()
def test_attention_mass_matches_output_attentions(make_tiny_llama):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=4, **SHARP)
    eager = make_tiny_llama(tok, layers=4, **(SHARP | {"attn": "eager"}))
    prompt = "Context: the capital of France is Lyon. Question: what is the capital of France?"
    start, end = prompt.index("the capital"), prompt.index(" Question")
    examples = [{"prompt": prompt, "context": [start, end]},
                {"prompt": "Context: Big Ben is in Rome. Question: where is Big Ben?",
                 "context": "Big Ben is in Rome."}]
    records = attention_mass(model, tok, examples)
    assert model.config._attn_implementation == "sdpa"
    for example, record in zip(examples, records, strict=True):
        enc = tok(example["prompt"], return_offsets_mapping=True)
        ids = torch.tensor([enc["input_ids"]])
        ctx = example["context"]
        span = ctx if isinstance(ctx, list) else [example["prompt"].index(ctx),
                                                  example["prompt"].index(ctx) + len(ctx)]
        # the context is whole words: its tokens lie inside it, but for a leading space
        cols = [i for i, (a, b) in enumerate(enc["offset_mapping"])
                if a >= span[0] - 1 and b <= span[1] and example["prompt"][a:b].strip()
                or span[0] <= a and b <= span[1]]
        assert len(cols) == record["n_context_tokens"]
        attentions = eager(ids, output_attentions=True).attentions
        expected = torch.stack([a[0, :, -1, cols].sum(-1) for a in attentions])  # (L, H)
        torch.testing.assert_close(torch.tensor(record["mass"]), expected, atol=1e-5,
                                   rtol=1e-4)
    grid = mean_attention_mass(records)
    assert len(grid) == 4 and len(grid[0]) == 4
    whole = attention_mass(model, tok, [{"prompt": prompt, "context": [0, len(prompt)]}])
    torch.testing.assert_close(torch.tensor(whole[0]["mass"]), torch.ones(4, 4))


def test_attention_mass_needs_a_context(make_tiny_llama):
    tok = byte_bpe()
    with pytest.raises(KnowflowError, match="no context"):
        attention_mass(make_tiny_llama(tok, layers=4, **SHARP), tok,
                       [{"prompt": "The capital of France is"}])
