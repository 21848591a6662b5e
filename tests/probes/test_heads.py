"""Per-head probes against references: hand edits of o_proj's input, one full forward pass
per head, the unblocked model's other heads, and the sublayer's own output."""

from __future__ import annotations

import pytest
import torch

import knowflow
from helpers import SHARP, byte_bpe
from knowflow.data.suites import get_suite
from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.heads import head_contributions, head_shape
from knowflow.lens.hooks import captured, hook_name
from knowflow.probes.head_attention import example_attention
from knowflow.probes.head_projection import head_top_tokens
from knowflow.probes.heads import (
    HeadsConfig,
    bootstrap_grid,
    conflict_prompt,
    half_effect_count,
    head_effects,
    heads,
    summarize_heads,
)


@pytest.fixture(scope="module")
def setup(make_tiny_llama):
    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=3, **SHARP)
    items = get_suite("cf-capitals", limit=3)
    prompts = [conflict_prompt(it, tok, "plain") for it in items]
    return model, tok, items, prompts


def _log_odds(model, prompt, **kwargs) -> float:
    logits = model(torch.tensor([prompt.ids]), **kwargs).logits[0, -1]
    return float(logits[prompt.cf_token] - logits[prompt.par_token])


def _by_hand(model, layer: int, head: int, value: torch.Tensor | None):
    """A pre-hook, written out here, that sets one head's slice of o_proj's input at the
    last position to `value` (zero when None)."""
    _, _, d = head_shape(model)

    def hook(module, args):
        x = args[0].clone()                                      # (1, seq, heads * head_dim)
        x[:, -1, head * d:(head + 1) * d] = 0.0 if value is None else value
        return (x,)
    return arch_of(model).o[layer].register_forward_pre_hook(hook)


@torch.no_grad()
def test_zero_and_mean_ablation_equal_hand_edits_one_forward_per_head(setup):
    model, _, _, prompts = setup
    n_layers, n_heads, d = head_shape(model)
    p = prompts[0]
    mean = torch.randn(n_layers, n_heads, d)
    base, effects = head_effects(model, p, ("zero", "mean"), mean, batch_size=5)
    assert base == pytest.approx(_log_odds(model, p), abs=1e-4)
    for layer in range(n_layers):
        for head in range(n_heads):
            for k, value in enumerate((None, mean[layer, head])):
                handle = _by_hand(model, layer, head, value)
                try:
                    ref = _log_odds(model, p) - base
                finally:
                    handle.remove()
                assert float(effects[k, layer, head]) == pytest.approx(ref, abs=1e-4)
    assert effects.abs().max() > 1e-3  # the edits do something


@torch.no_grad()
def test_context_block_matches_one_masked_forward_and_spares_other_heads(setup):
    model, _, _, prompts = setup
    n_layers, n_heads, d = head_shape(model)
    p = prompts[1]
    seq = len(p.ids)
    with intercepted(model) as layer_of:
        base, effects = head_effects(model, p, ("block",), batch_size=4, layer_of=layer_of)
        for layer, head in ((0, 1), (2, 3)):
            block = torch.zeros(1, n_heads, seq, seq, dtype=torch.bool)
            block[0, head, -1, list(p.context)] = True
            plan = AttentionPlan(block={layer: block}, layer_of=layer_of)
            z_point = hook_name(layer, "attn.z")
            with captured(model, [z_point]) as z:
                ref = _log_odds(model, p, knowflow_plan=plan) - base
            blocked = z[z_point][0, -1]                               # (heads, head_dim)
            with captured(model, [z_point]) as z:
                _log_odds(model, p)
            plain = z[z_point][0, -1]
            assert float(effects[0, layer, head]) == pytest.approx(ref, abs=1e-4)
            others = [h for h in range(n_heads) if h != head]
            torch.testing.assert_close(blocked[others], plain[others], atol=1e-6, rtol=0)
            assert not torch.allclose(blocked[head], plain[head])


@torch.no_grad()
def test_head_contributions_sum_to_the_attention_output(setup):
    model, tok, _, prompts = setup
    n_layers, n_heads, _ = head_shape(model)
    z: dict[int, torch.Tensor] = {}
    handles = [proj.register_forward_pre_hook(  # by hand, not the attn.z hook point
        lambda m, a, layer=layer: z.__setitem__(layer, a[0])) for layer, proj in
        enumerate(arch_of(model).o)]
    with captured(model) as acts:
        model(torch.tensor([prompts[0].ids]))
    for h in handles:
        h.remove()
    for layer in range(n_layers):
        parts = head_contributions(model, layer, z[layer])       # (1, seq, heads, d_model)
        bias = arch_of(model).o[layer].bias
        total = parts.sum(-2) + (0 if bias is None else bias)
        torch.testing.assert_close(total, acts[hook_name(layer, "attn.out")], atol=1e-5,
                                   rtol=1e-5)
    top = head_top_tokens(model, torch.stack([z[i][0, -1] for i in range(n_layers)]))
    assert top.shape == (n_layers, n_heads)


def test_probe_records_summary_and_registry(setup):
    model, tok, items, _ = setup
    recs = knowflow.probe(model, items, tokenizer=tok, kind="heads", prompt_format="plain",
                          top=3, n_bootstrap=50).records
    n_layers, n_heads, _ = head_shape(model)
    assert len(recs) == len(items) * n_layers * n_heads
    s = summarize_heads(recs, HeadsConfig(top=3, n_bootstrap=50))
    assert s["n_examples"] == len(items)
    effects = [c["effect"] for c in s["context_heads"]]
    assert effects == sorted(effects) and all(e < 0 for e in effects) and len(effects) <= 3
    grid = torch.tensor(s["effects"]["mean"]["mean"])
    for c in s["memory_heads"]:
        assert c["effect"] > 0 and c["ci"][0] <= c["effect"] <= c["ci"][1]
        assert c["effect"] == pytest.approx(float(grid[c["layer"], c["head"]]))
    for name in ("prediction", "counterfactual", "parametric"):
        assert torch.tensor(s["projection"][name]).shape == (n_layers, n_heads)
    with pytest.raises(ConfigError, match="rank_by"):
        knowflow.probe(model, items, tokenizer=tok, kind="heads", ablations=("zero",))
    with pytest.raises(KnowflowError, match="context"):
        heads(model, tok, [items[0].__class__(**{**items[0].to_dict(), "context": ""})],
              HeadsConfig(prompt_format="plain"))


def test_half_effect_count_and_bootstrap_grid():
    assert half_effect_count([-4.0, -1.0, -1.0, -1.0, -1.0]) == 1
    assert half_effect_count([1.0, 1.0, 1.0, 1.0]) == 2
    assert half_effect_count([]) == 0
    values = torch.arange(12.0).view(4, 3).numpy()
    mean, ci = bootstrap_grid(values, n_boot=200)
    assert mean.tolist() == [4.5, 5.5, 6.5]
    assert (ci[:, 0] <= mean).all() and (mean <= ci[:, 1]).all()


@torch.no_grad()
def test_head_projection_rates_match_a_hand_projection(make_tiny_llama):
    from knowflow.probes.examples import ProbeExample
    from knowflow.probes.head_projection import head_projection, summarize_head_projection
    from knowflow.probes.projection import project

    tok = byte_bpe()
    model = make_tiny_llama(tok, layers=2, **SHARP)
    ex = ProbeExample(prompt="The capital of France is", subject="France", id="fr")
    recs = head_projection(model, tok, [ex])
    n_layers, n_heads, _ = head_shape(model)
    assert [r["layer"] for r in recs] == list(range(n_layers))
    z: dict[int, torch.Tensor] = {}
    handles = [proj.register_forward_pre_hook(
        lambda m, a, layer=layer: z.__setitem__(layer, a[0][0, -1])) for layer, proj in
        enumerate(arch_of(model).o)]
    pred = int(model(torch.tensor([tok(ex.prompt)["input_ids"]])).logits[0, -1].argmax())
    for h in handles:
        h.remove()
    for layer in range(n_layers):
        parts = head_contributions(model, layer, z[layer])        # (heads, d_model)
        top = project(model, parts).argmax(-1).tolist()
        assert recs[layer]["head_extracts"] == [t == pred for t in top]
    s = summarize_head_projection(recs)
    assert len(s["head_rate"]) == n_layers and len(s["attn_rate"]) == n_layers
    assert s["best_heads"][0]["rate"] == max(max(row) for row in s["head_rate"])


@torch.no_grad()
def test_example_attention_is_the_eager_models_answer_row(setup, make_tiny_llama):
    """The heads probe's example pattern equals the eager model's own attention row from the
    answer position, for each of the top heads, and its context mass sums that row over
    the context's tokens."""
    model, tok, items, prompts = setup
    result = knowflow.probe(model, items, tokenizer=tok, kind="heads", prompt_format="plain",
                            top=3, n_bootstrap=50)
    example = result.summary["example_attention"]
    eager = make_tiny_llama(tok, layers=3, **(SHARP | {"attn": "eager"}))
    p = prompts[0]
    rows = eager(torch.tensor([p.ids]), output_attentions=True).attentions  # L x (1, H, q, k)
    ranked = result.summary["context_heads"][:3] + result.summary["memory_heads"][:3]
    assert example["example"] == p.id and len(example["tokens"]) == len(p.ids)
    assert [(h["layer"], h["head"]) for h in example["heads"]] == \
        [(c["layer"], c["head"]) for c in ranked]
    for h in example["heads"]:
        expected = rows[h["layer"]][0, h["head"], -1]                     # (k,)
        torch.testing.assert_close(torch.tensor(h["weights"]), expected, atol=1e-4, rtol=0)
        assert h["context_mass"] == pytest.approx(float(expected[list(p.context)].sum()),
                                                  abs=1e-5)
    assert example_attention(model, tok, items, {"context_heads": [], "memory_heads": []},
                             "plain") is None


def test_heads_items_from_any_form_of_data(tmp_path):
    """`conflict_items`, what the heads probe runs on: a `pathlib.Path` or a `str` data file
    (not a TypeError from `list(Path)`), suite names, items in memory; anything else named."""
    import json
    from pathlib import Path

    from knowflow.errors import DataError
    from knowflow.probes.suites import conflict_items

    rows = [{"context": f"Zorb{i} is the capital of Land{i}.", "question": f"What is the "
             f"capital of Land{i}?", "answer": f"Zorb{i}", "memory_answer": f"Paris{i}"}
            for i in range(4)]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for data in (path, str(path)):
        items = conflict_items(data, limit=3)
        assert len(items) == 3 and {it.suite for it in items} == {"mine"}
    assert len(conflict_items(None, limit=2)) == 2
    assert {it.suite for it in conflict_items("cf-capitals,cf-bio", limit=40)} <= \
        {"cf-capitals", "cf-bio"}
    assert conflict_items(items) == items
    with pytest.raises(ConfigError, match="'data': expected a suite name, a data file"):
        conflict_items(5)
    with pytest.raises(ConfigError, match="item 0 is dict .*, not a ConflictItem"):
        conflict_items(rows)
    with pytest.raises(DataError, match="no such file"):
        conflict_items(Path(tmp_path / "missing.jsonl"))


def test_the_heads_probe_takes_a_path(tiny_model_dir, tmp_path):
    from pathlib import Path

    path = tmp_path / "mine.jsonl"
    path.write_text('{"context": "Zorb is the capital of Land.", "question": "What is the '
                    'capital of Land?", "answer": "Zorb", "memory_answer": "Paris"}\n')
    result = knowflow.probe(str(tiny_model_dir), Path(path), kind="heads", limit=1,
                            ablations=("zero",), rank_by="zero", out=tmp_path / "out")
    assert result.summary["n_examples"] == 1
