"""report.reliance: four panels with one line per run, a star at each run's peak
counterfactual accuracy (the earliest step on a tie), and the sft / per-arm figure files."""

from knowflow.report.reliance import plot_arms, plot_sft, reliance_figure
from knowflow.store.files import atomic_write_jsonl

RUN_A = [{"step": s, "cf_acc": cf, "param_acc": 1 - cf, "attn_context": 0.5, "train_loss": 2.0}
         for s, cf in ((0, 0.2), (10, 0.6), (20, 0.6), (30, 0.4))]
RUN_B = [{"step": s, "cf_acc": cf, "param_acc": None} for s, cf in ((0, 0.1), (5, 0.3))]


def _lines(ax) -> dict[str, tuple[list, list]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.lines}


def test_one_line_per_run_per_panel_and_a_star_at_the_first_peak(tmp_path, drawn, png_shape):
    path = reliance_figure({"a": RUN_A, "b": RUN_B}, tmp_path / "r.png", title="t")
    assert png_shape(path)[:2] == (352, 4 * 462)
    (fig,) = drawn
    cf, param, attn, loss = fig.axes
    assert fig.get_suptitle() == "t"
    lines = _lines(cf)
    assert lines["a"] == ([0, 10, 20, 30], [0.2, 0.6, 0.6, 0.4])
    stars = [line for line in cf.lines if line.get_marker() == "*"]
    assert [(list(s.get_xdata()), list(s.get_ydata())) for s in stars] == [([10], [0.6]),
                                                                         ([5], [0.3])]
    assert stars[0].get_color() == cf.lines[0].get_color()
    assert set(_lines(param)) == {"a"}  # b recorded no parametric accuracy
    assert set(_lines(attn)) == {"a"} and set(_lines(loss)) == {"a"}
    assert cf.get_ylim() == (-0.03, 1.03)


def test_plot_sft_and_plot_arms_write_reliance_png(tmp_path, drawn):
    assert plot_sft(tmp_path) == [] and plot_arms(tmp_path) == []
    atomic_write_jsonl(tmp_path / "metrics.jsonl", [{**r, "arm": "lora"} for r in RUN_A]
                       + [{**r, "arm": "full"} for r in RUN_B])
    assert plot_arms(tmp_path) == [tmp_path / "figures" / "reliance.png"]
    assert {k for k in _lines(drawn[0].axes[0]) if not k.startswith("_")} == {"lora", "full"}
    assert plot_sft(tmp_path) == [tmp_path / "figures" / "reliance.png"]
    assert {k for k in _lines(drawn[1].axes[0]) if not k.startswith("_")} == {"run"}
