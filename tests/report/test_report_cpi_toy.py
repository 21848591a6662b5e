"""experiments.cpi_toy.figures: one figure per part present in metrics.jsonl, each panel drawing the
records' own numbers, the mixed arm as the baseline of the comparisons."""

from knowflow.experiments.cpi_toy.figures import plot_cpi_toy
from knowflow.store.files import atomic_write_jsonl

STEPS = (0, 10, 20)
KEYS = ("mc", "cf_acc", "param_acc", "attn_context_test", "attn_subject_test",
        "attn_relation_test", "proj_theta_C", "proj_theta_S", "attn_subject_C+S",
        "value_conf_C+S")


def _records(part: str, arm: str, base: float) -> list[dict]:
    return [{"part": part, "arm": arm, "step": s,
             **{k: base + i / 100 + s / 1000 for i, k in enumerate(KEYS)}} for s in STEPS]


def _run(tmp_path, arms) -> list[dict]:
    records = [r for i, (part, arm) in enumerate(arms) for r in _records(part, arm, i / 10)]
    atomic_write_jsonl(tmp_path / "metrics.jsonl", records)
    return records


def _lines(ax) -> dict[str, list]:
    return {line.get_label(): list(line.get_ydata()) for line in ax.lines
            if not line.get_label().startswith("_")}


def test_every_part_has_its_figure_and_the_panels_draw_its_records(tmp_path, drawn, png_shape):
    records = _run(tmp_path, [("inversion", "mixed"), ("c_only", "c_only"), ("with_s", "with_s"),
                              ("train_v", "train_v"), ("mitigations", "baseline"),
                              ("mitigations", "filtered")])
    paths = plot_cpi_toy(tmp_path)
    assert [p.name for p in paths] == ["1_inversion.png", "2_c_only.png", "3_with_s.png",
                                       "4_train_v.png", "5_mitigations.png"]
    assert all(png_shape(p)[0] > 100 for p in paths)
    assert [len(f.axes) for f in drawn] == [3, 2, 3, 3, 3]
    mixed = [r for r in records if r["arm"] == "mixed"]
    inversion = drawn[0].axes
    assert _lines(inversion[0]) == {
        "M_C (p of context answer)": [r["mc"] for r in mixed],
        "counterfactual acc": [r["cf_acc"] for r in mixed],
        "parametric acc": [r["param_acc"] for r in mixed]}
    assert set(_lines(inversion[1])) == {"context", "subject", "relation"}
    assert inversion[2].get_yscale() == "symlog"
    c_only = [r for r in records if r["arm"] == "c_only"]
    assert _lines(drawn[1].axes[0]) == {"C + C+S": [r["mc"] for r in mixed],
                                        "C only": [r["mc"] for r in c_only]}
    arms = [{"C + C+S", "C only"}, {"C + C+S", "+ S points"}, {"W_KQ only", "W_KQ + W_V"},
            {"baseline", "filtered"}]
    for fig, names in zip(drawn[1:], arms, strict=True):
        assert all(set(_lines(ax)) == names for ax in fig.axes), fig.get_suptitle()


def test_without_the_mixed_arm_the_comparisons_have_no_baseline(tmp_path, drawn):
    _run(tmp_path, [("c_only", "c_only")])
    assert [p.name for p in plot_cpi_toy(tmp_path)] == ["2_c_only.png"]
    assert [set(_lines(ax)) for ax in drawn[0].axes] == [{"C only"}, {"C only"}]
