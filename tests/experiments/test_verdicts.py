"""Each experiment's one-sentence verdict (the report's first line) follows its numbers: it
says inversion / OCR when the criterion holds, says the opposite when it does not, and is
absent when the part that would be judged did not run."""

import math

from knowflow.experiments.cpi_toy import experiment as cpi_toy
from knowflow.experiments.inversion_smollm2 import experiment as inversion_smollm2
from knowflow.experiments.ocr_smollm2 import experiment as ocr_smollm2
from knowflow.experiments.ocr_toy import experiment as ocr_toy

INV = {"mc_start": 0.068, "mc_peak": 0.469, "mc_peak_step": 21, "steps": 1000,
       "mc_final": 0.107, "mc_fall": 0.362}


def test_cpi_toy_verdict_follows_the_criterion():
    shown = cpi_toy.verdict({"inversion": INV, "c_only": {"mc_fall": 0.0}})
    assert shown.startswith("The theory model inverts") and "0.469 (step 21" in shown
    flat = cpi_toy.verdict({"inversion": {**INV, "mc_fall": 0.05, "mc_final": 0.419},
                            "c_only": {"mc_fall": 0.0}})
    assert flat.startswith("No inversion") and "fall 0.050" in flat
    control_falls = cpi_toy.verdict({"inversion": INV, "c_only": {"mc_fall": 0.2}})
    assert control_falls.startswith("No inversion")
    assert cpi_toy.verdict({"c_only": {"mc_fall": 0.0}}) is None


def _ocr(f_loss: float, m_ratio: float, fitted: bool = True) -> str:
    claims = {"both_train_loss_below_0.05": fitted,
              "factorized_test_impl_loss_below_0.1": f_loss < 0.1,
              "merged_test_impl_loss_at_least_0.9_log_candidates": m_ratio >= 0.9,
              "merged_test_impl_loss_over_log_candidates": m_ratio}
    return ocr_toy.verdict(claims, {"test_impl_acc": 1.0, "test_impl_loss": f_loss},
                           {"test_impl_acc": 0.25, "test_impl_loss": m_ratio})


def test_ocr_toy_verdict_names_what_failed():
    assert _ocr(0.01, 1.27).startswith("Out-of-context reasoning as the paper finds it")
    assert "factorized model does not infer" in _ocr(0.5, 1.27)
    assert "merged model infers the unseen implications too" in _ocr(0.01, 0.3)
    assert _ocr(0.01, 1.27, fitted=False).startswith("Inconclusive")
    assert "1.27 x log #candidates" in _ocr(0.01, 1.27)


def test_ocr_smollm2_verdict_reads_both_gains():
    def verdict(causal: float, other: float) -> str:
        return ocr_smollm2.findings({"steps": 40, "causal_mean_rank_gain": causal,
                                     "noncausal_mean_rank_gain": other})["verdict"]

    assert "+1.50 in causal and +0.75 in non-causal" in verdict(1.5, 0.75)
    assert "alike, as the paper finds" in verdict(1.5, 0.75)
    assert "only causal" in verdict(1.5, -0.2)
    assert "no out-of-context inference" in verdict(-0.1, 0.0)
    assert "not tested" in verdict(1.0, math.nan)


def _arm(start: float, peak: float, final: float) -> dict:
    return {"cf_acc_start": start, "cf_acc_peak": peak, "cf_acc_peak_step": 30,
            "cf_acc_final": final, "cf_acc_rise": peak - start, "cf_acc_fall": peak - final}


def test_inversion_smollm2_verdict_is_about_the_lora_arm():
    found = inversion_smollm2.findings({"lora": _arm(0.1, 0.6, 0.3),
                                        "curated": _arm(0.1, 0.6, 0.55)})
    assert found["verdict"].startswith("Inversion in LoRA finetuning")
    assert "curated 0.050" in found["verdict"] and found["lora_cf_acc_fall"] == 0.3
    flat = inversion_smollm2.findings({"lora": _arm(0.1, 0.2, 0.2)})
    assert flat["verdict"].startswith("No inversion")
    assert "verdict" not in inversion_smollm2.findings({"curated": _arm(0.1, 0.6, 0.3)})
