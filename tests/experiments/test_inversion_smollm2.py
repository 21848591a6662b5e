"""`inversion-smollm2` end to end on a tiny random Llama saved as a model folder: every arm
writes its records, the summary has its documented keys, and bad configs fail before writing."""

import pytest

from knowflow.errors import ConfigError
from knowflow.experiments.runner import build_config, run_experiment
from knowflow.store.readers import read_json, read_jsonl


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir


def test_all_arms_write_records(tmp_path, model_dir):
    sets = [f"model={model_dir}", "workers=1", "mixture.size=24", "sft.steps=2",
            "sft.batch_size=4", "sft.prompt_format=chat", "track.prompt_format=chat",
            "track.every=1", "track.limit=2", "track.batch_size=2", "sft.max_length=512",
            "arms=lora,full,curated,qk_only,augmented,dynamic", "dynamic.every=1",
            "indist_n=2", "curate_drop=0.25", "dynamic.fraction=0.25", "dynamic.threshold=none"]
    result = run_experiment("inversion-smollm2", sets, runs_dir=tmp_path)
    summary = read_json(result.out_dir / "summary.json")
    records = read_jsonl(result.out_dir / "metrics.jsonl")
    for arm in ("lora", "full", "curated", "qk_only", "augmented", "dynamic"):
        s = summary[arm]
        # both scorings, per tracked suite (held-out cf-quotes and cf-world items)
        for key in ("cf-quotes/cf_acc", "cf-quotes/cf_acc_gen", "cf-world/cf_acc_gen"):
            assert set(s["curves"][key]) >= {"start", "peak", "peak_step", "final"}, key
        assert 0 <= s["indist_final"] <= 1
        for key in ("cf_acc_start", "cf_acc_peak", "cf_acc_peak_step", "cf_acc_final",
                    "seconds"):
            assert s[key] is not None, (arm, key)
        assert [r["step"] for r in records if r["arm"] == arm] == [0, 1, 2]
    # every arm starts from the same model and is tracked on the same held-out items
    assert len({summary[a]["cf_acc_start"] for a in ("lora", "curated", "qk_only",
                                                     "augmented")}) == 1
    assert len({summary[a]["indist_start"] for a in ("lora", "full", "dynamic")}) == 1
    dyn = read_jsonl(result.out_dir / "arms" / "dynamic" / "curation.jsonl")
    # rows dropped stay out (the arm's default): 6 of 24 at step 0, then 6 + round(0.25 * 18)
    assert [r["step"] for r in dyn] == [0, 1] and [r["n_dropped"] for r in dyn] == [6, 10]
    assert set(dyn[0]["dropped"]) < set(dyn[1]["dropped"])
    assert summary["findings"].get("dynamic_fall_removed") is not None or \
        summary["lora"]["cf_acc_fall"] == 0
    assert summary["curated"]["n_examples"] == 18  # 24 minus the 25% least critical
    # 24 plus up to 6 counterfactual copies (fewer when a relation has one answer only)
    assert 24 < summary["augmented"]["n_examples"] <= 30
    # trainable parameters by hand from the model folder: QK-only = the query and key
    # projections; LoRA = r * (in + out) per adapted projection
    from transformers import AutoModelForCausalLM

    from knowflow.lens.adapt import lora_targets
    ref = AutoModelForCausalLM.from_pretrained(model_dir)
    sft = build_config("inversion-smollm2", [f"model={model_dir}"]).sft
    qk = sum(p.numel() for n, p in ref.named_parameters()
             if n.endswith(("q_proj.weight", "k_proj.weight")))
    targets = lora_targets(ref, sft.lora_targets)  # none given: the family's (q/k/v/o_proj)
    assert targets == ["q_proj", "k_proj", "v_proj", "o_proj"]
    lora = sum(sft.lora_r * (m.in_features + m.out_features) for n, m in ref.named_modules()
               if n.rsplit(".", 1)[-1] in targets)
    assert summary["qk_only"]["trainable_params"] == qk
    assert summary["lora"]["trainable_params"] == lora
    assert (result.out_dir / "figures" / "reliance.png").exists()
    assert (result.out_dir / "report.html").exists()


def test_bad_config_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match="arms"):
        run_experiment("inversion-smollm2", ["arms=lora,bogus"], runs_dir=tmp_path)
    with pytest.raises(ConfigError, match="track.prompt_format"):
        run_experiment("inversion-smollm2", ["sft.prompt_format=chat"], runs_dir=tmp_path)
    assert not list(tmp_path.rglob("*.json"))
