"""The probes on the real SmolLM2-135M-Instruct (slow: it needs the converted model folder,
which `make setup` + a first load creates; run with -m slow)."""

from __future__ import annotations

import pytest
import torch

from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.probes.examples import ProbeExample, builtin_facts
from knowflow.probes.knockout import KnockoutConfig, knockout, knockout_logits
from knowflow.probes.mass import attention_mass
from knowflow.probes.spans import locate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from knowflow.lens.load import load_model

    torch.set_num_threads(1)
    return load_model(device="cpu")


def test_spans_on_the_real_tokenizer(smollm2):
    _, tok = smollm2
    for fact in builtin_facts():
        loc = locate(tok, fact)
        assert tok.decode([loc.input_ids[i] for i in loc.subject]).strip() == fact.subject
        assert tok.decode([loc.input_ids[i] for i in loc.relation]).strip() == fact.relation


@torch.no_grad()
def test_knockout_references_on_the_real_model(smollm2):
    model, tok = smollm2
    loc = locate(tok, builtin_facts()[0])
    ids = torch.tensor([loc.input_ids])
    plain = model(ids).logits
    with intercepted(model) as layer_of:
        assert torch.equal(model(ids, knowflow_plan=AttentionPlan(layer_of=layer_of)).logits,
                           plain)
        variants = [((), None), (loc.subject, (10, 18)), (tuple(range(loc.last)), (0, 29))]
        shared = knockout_logits(model, loc, variants, layer_of=layer_of)
        full = knockout_logits(model, loc, variants, shared_prefix=False, layer_of=layer_of)
    torch.testing.assert_close(shared, full, atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(shared[0], plain[0, -1], atol=2e-4, rtol=1e-4)
    alone = model(ids[:, -1:], position_ids=torch.tensor([[loc.last]])).logits[0, -1]
    torch.testing.assert_close(shared[2], alone, atol=2e-4, rtol=1e-4)


def test_subject_knockout_hurts_a_known_fact(smollm2):
    """Cutting the last position off the subject in the upper-middle layers destroys the
    prediction of a fact the model knows (the paper's central observation)."""
    model, tok = smollm2
    fact = builtin_facts()[0]  # The capital of France is -> Paris
    records = knockout(model, tok, [fact], KnockoutConfig(source=("subject",)))
    assert records and records[0]["prediction"] == " Paris"
    assert min(r["rel_change"] for r in records) < -0.5


@torch.no_grad()
def test_attention_mass_matches_eager_output_attentions(smollm2):
    model, tok = smollm2
    prompt = "Context: The capital of France is Lyon.\nQuestion: What is the capital of France?"
    ex = ProbeExample(prompt=prompt, context=(9, 38))
    mass = torch.tensor(attention_mass(model, tok, [ex])[0]["mass"])
    loc = locate(tok, ex)
    model.set_attn_implementation("eager")
    try:
        att = model(torch.tensor([loc.input_ids]), output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    expected = torch.stack([a[0, :, -1, list(loc.context)].sum(-1) for a in att])
    torch.testing.assert_close(mass, expected, atol=1e-4, rtol=1e-3)
