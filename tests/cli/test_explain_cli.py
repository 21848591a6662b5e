"""`knowflow explain`: a run folder with its report; bad input is one line, exit 2, nothing
written."""

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from helpers import byte_tokenizer
from knowflow.cli import app
from knowflow.data.facts import ConflictItem
from knowflow.errors import DataError
from knowflow.explanation.run import _check_answer

runner = CliRunner()
CONTEXT = "Paris is in France. The sky is blue today. Rome is in Italy."


def _run(tiny_model_dir, tmp_path, *args):
    return runner.invoke(app, ["explain", "--model", str(tiny_model_dir), "--runs-dir",
                               str(tmp_path / "runs"), "--ablations", "8", "--holdout", "4",
                               *args])


def test_one_item_writes_records_summary_and_report(tiny_model_dir, tmp_path):
    ctx = tmp_path / "context.txt"
    ctx.write_text(CONTEXT + "\n")
    out = tmp_path / "out"
    result = _run(tiny_model_dir, tmp_path, "--context", str(ctx), "--question",
                  "Where is Rome?", "--answer", "Italy", "--out", str(out))
    assert result.exit_code == 0, result.output
    rec = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert rec["context"] == CONTEXT and rec["answer"] == "Italy"
    assert len(rec["sentences"]) == 3
    page = (out / "report.html").read_text()
    assert "Where is Rome?" in page and "Rome is in Italy." in page and "<svg" in page
    assert (out / "figures" / "layers.png").exists()


def test_the_api_saves_the_folder_the_command_writes(tiny_model_dir, tmp_path):
    """`knowflow.explain(...).save(dir)` finishes the folder as the command does: the same
    files, records and summary byte for byte (timings aside), and a report."""
    import knowflow

    out = tmp_path / "cli"
    result = _run(tiny_model_dir, tmp_path, "--context", CONTEXT, "--question",
                  "Where is Rome?", "--answer", "Italy", "--out", str(out), "--threads", "1")
    assert result.exit_code == 0, result.output
    torch.set_num_threads(1)
    res = knowflow.explain(str(tiny_model_dir), CONTEXT, "Where is Rome?", "Italy",
                           ablations=8, holdout=4, device="cpu")
    api = res.save(tmp_path / "api")
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(api).as_posix() for p in api.rglob("*")
                           if p.is_file())
    assert "report.html" in files and "figures/layers.png" in files

    def timeless(value):  # the JSON without its clock readings
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if "seconds" not in k}
        return [timeless(v) for v in value] if isinstance(value, list) else value

    def read(path):
        text = path.read_text()
        return timeless([json.loads(line) for line in text.splitlines()]
                        if path.suffix == ".jsonl" else json.loads(text))
    for name in ("records.jsonl", "summary.json"):
        assert read(out / name) == read(api / name), name


@pytest.mark.parametrize("args, needle", [
    (["--context", "", "--question", "Q?"], "context is empty"),
    (["--context", CONTEXT, "--question", "Where is Rome?", "--answer", "  "],
     "answer to explain is empty"),
    (["--context", "A long one. " * 200, "--question", "Q?"], "longer than the model's window"),
    (["--context", CONTEXT], "--question"),
    (["--context", CONTEXT, "--question", "Q?", "--suite", "needle-cf"], "exactly one"),
    (["--suite", "needle-cf", "--ablations", "2"], "ablations"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tiny_model_dir, tmp_path, args,
                                                          needle):
    result = _run(tiny_model_dir, tmp_path, *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_an_answer_outside_the_models_vocabulary_is_refused(make_tiny_llama):
    tok = byte_tokenizer()
    model = make_tiny_llama(tok)
    # a model whose output layer is smaller than its tokenizer: it cannot emit the last ids
    small = torch.nn.Linear(model.config.hidden_size, len(tok) - 3, bias=False)
    model.set_output_embeddings(small)
    item = ConflictItem(id="i", suite="explain", context=CONTEXT, question="Q?",
                        counterfactual_answer="", parametric_answer="")
    with pytest.raises(DataError, match="cannot produce"):
        _check_answer(model, tok, item, "<|user|>", 10)
    _check_answer(model, tok, item, "Italy", 10)                 # bytes it can emit: fine


def test_gradient_attribution_needs_no_fit_and_equals_a_unit_weight_estimator(
        tiny_model_dir, tmp_path, monkeypatch):
    """`--attribution gradient` runs without an estimator (and says so); its weights are those
    of `--attribution learned` with a `soft` estimator whose head weights are all 1."""
    from knowflow.explanation.estimator import save_estimator, unit_estimator
    from knowflow.lens.load import load_model

    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))
    args = ["--context", CONTEXT, "--question", "Where is Rome?", "--answer", "Italy",
            "--levels", "source,sentences"]
    out = tmp_path / "gradient"
    got = _run(tiny_model_dir, tmp_path, *args, "--attribution", "gradient", "--out", str(out))
    assert got.exit_code == 0, got.output
    assert "attribution: gradient (one pass" in got.output and "no fit" in got.output
    rec = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert rec["attribution_method"] == "gradient" and rec["lds"] is not None
    model, _ = load_model(str(tiny_model_dir))
    unit = unit_estimator(model)
    assert unit.features == ("soft",) and set(unit.weights) == {1.0}
    path = save_estimator(unit, "unit", tmp_path / "unit.json")
    out = tmp_path / "unit"
    same = _run(tiny_model_dir, tmp_path, *args, "--attribution", "learned", "--set",
                f"estimator={path}", "--out", str(out))
    assert same.exit_code == 0, same.output
    again = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert again["attribution_method"] == "learned"
    weights = [s["attribution"] for s in rec["sentences"]]
    assert weights == pytest.approx([s["attribution"] for s in again["sentences"]], abs=1e-9)
    assert max(abs(w) for w in weights) > 0


def test_gradient_at_masks_is_recorded_as_such_and_odd_mask_counts_are_refused(
        tiny_model_dir, tmp_path, monkeypatch):
    """`--set gradient_masks=4` averages the gradient over 4 antithetic mask points: the
    record says `gradient@4`, the line says so, the scores differ from the one point and
    repeat exactly; an odd count, or masks with a learned estimator, is refused (exit 2, the
    field named, nothing written)."""
    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))
    args = ["--context", CONTEXT, "--question", "Where is Rome?", "--answer", "Italy",
            "--levels", "source,sentences", "--attribution", "gradient"]
    recs = {}
    for name, extra in (("one", []), ("four", ["--set", "gradient_masks=4"]),
                        ("again", ["--set", "gradient_masks=4"]),
                        ("fixed", ["--set", "gradient_masks=4", "--set",
                                   "learned_ablations=4"])):
        got = _run(tiny_model_dir, tmp_path, *args, *extra, "--out", str(tmp_path / name))
        assert got.exit_code == 0, got.output
        recs[name] = json.loads((tmp_path / name / "records.jsonl").read_text().split("\n")[0])
        if extra:
            assert "averaged over 4 masks" in got.output
    assert recs["four"]["attribution_method"] == "gradient@4"
    weights = {k: [s["attribution"] for s in r["sentences"]] for k, r in recs.items()}
    assert weights["four"] == weights["again"]
    assert weights["four"] != pytest.approx(weights["one"], abs=1e-6)
    # 4 scored ablations correct the masked gradient (the benchmark's gradient+K rows)
    assert recs["fixed"]["attribution_method"] == "gradient@4+4"
    assert weights["fixed"] != pytest.approx(weights["four"], abs=1e-6)
    odd = _run(tiny_model_dir, tmp_path, *args, "--set", "gradient_masks=3", "--out",
               str(tmp_path / "odd"))
    assert odd.exit_code == 2 and "gradient_masks" in odd.output
    assert not (tmp_path / "odd").exists()
    learned = _run(tiny_model_dir, tmp_path, *args[:-2], "--attribution", "learned", "--set",
                   "gradient_masks=2", "--out", str(tmp_path / "learned"))
    assert learned.exit_code == 2 and "gradient only" in learned.output


def test_fit_then_learned_attribution_and_learned_without_an_estimator(tiny_model_dir,
                                                                       tmp_path, monkeypatch):
    """`explain fit` saves the estimator beside the model's cache entry with its provenance;
    `--attribution learned` uses it (and says so); without one it is one line, exit 2."""
    monkeypatch.setenv("KNOWFLOW_CACHE", str(tmp_path / "cache"))
    args = ["--context", CONTEXT, "--question", "Where is Rome?", "--answer", "Italy",
            "--attribution", "learned"]
    missing = _run(tiny_model_dir, tmp_path, *args)
    assert missing.exit_code == 2, missing.output
    lines = [line for line in missing.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "attribution" in lines[0] and "explain fit" in lines[0]
    fit = runner.invoke(app, ["explain", "fit", "--model", str(tiny_model_dir), "--contexts",
                              "4", "--ablations", "8"])
    assert fit.exit_code == 0, fit.output
    (saved,) = (tmp_path / "cache" / "models").glob("*.explain-learned.json")
    prov = json.loads(saved.read_text())["provenance"]
    assert prov["n_contexts"] == 4 and prov["ablations_used"] == 32
    assert "made-up people" in prov["training_data"] and prov["model_fingerprint"]
    out = tmp_path / "learned"
    used = _run(tiny_model_dir, tmp_path, *args, "--out", str(out))
    assert used.exit_code == 0, used.output
    assert "attribution: learned" in used.output
    rec = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert rec["attribution_method"] == "learned" and "learned" in rec["seconds"]
    auto = _run(tiny_model_dir, tmp_path, "--context", CONTEXT, "--question", "Where?",
                "--answer", "Italy", "--attribution", "auto", "--levels",
                "source,sentences")
    assert auto.exit_code == 0 and "attribution: learned" in auto.output  # fitted: used
    out = tmp_path / "learned4"
    checked = _run(tiny_model_dir, tmp_path, *args, "--set", "learned_ablations=4",
                   "--holdout", "8", "--out", str(out))
    assert checked.exit_code == 0, checked.output
    assert "one pass + 4 ablations" in checked.output
    rec = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert rec["attribution_method"] == "learned+4"
    assert rec["n_ablated_prompts"] == 4 + 8 + len(rec["topk_drop"])
    over = _run(tiny_model_dir, tmp_path, *args, "--set", "learned_ablations=100")
    assert over.exit_code == 2 and "learned_ablations" in over.output
    plain = _run(tiny_model_dir, tmp_path, "--context", CONTEXT, "--question", "Where?",
                 "--answer", "Italy", "--levels", "source,sentences")
    assert plain.exit_code == 0 and "attribution: ablation" in plain.output  # the default
    bad = runner.invoke(app, ["explain", "refit", "--model", str(tiny_model_dir)])
    assert bad.exit_code == 2 and "No such command" in bad.output  # fit is the one


LAYOUTS = Path(__file__).parent.parent / "data" / "layouts"


@pytest.mark.parametrize("name", ["nq_swap.jsonl", "conflictqa.json", "memotrap.csv",
                                  "clasheval.jsonl"])
def test_explain_reads_each_published_layout(tiny_model_dir, tmp_path, name):
    """`--data` in each published layout (the files of tests/data/layouts, recognised from
    their columns): one record per item with the item's own context split into sentences,
    each with a finite attribution, and the layout named in the run's config."""
    out = tmp_path / "out"
    got = _run(tiny_model_dir, tmp_path, "--data", str(LAYOUTS / name), "--limit", "2",
               "--levels", "source,sentences", "--attribution", "gradient", "--out", str(out))
    assert got.exit_code == 0, got.output
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 2
    for rec in recs:             # a one-sentence passage (NQ-Swap's) is removed exactly
        one = len(rec["sentences"]) == 1
        assert rec["attribution_method"] == ("leave-one-out" if one else "gradient")
        assert all(math.isfinite(s["attribution"]) for s in rec["sentences"])
        assert rec["context"].startswith(rec["sentences"][0]["text"][:10])


def test_a_one_sentence_context_is_attributed_by_its_removal(tiny_model_dir, tmp_path):
    """One sentence: its weight is log p(span | context) - log p(span | context removed),
    one scored prompt, no LDS; the same however the sentences would be attributed."""
    from knowflow.data.facts import ConflictItem as Item
    from knowflow.explanation.attribution import score_masks
    from knowflow.explanation.options import ExplainConfig
    from knowflow.explanation.splitter import split_sentences
    from knowflow.lens.load import load_model

    recs = {}
    for method in ("ablation", "gradient"):
        out = tmp_path / method
        got = _run(tiny_model_dir, tmp_path, "--context", "Rome is in Italy.", "--question",
                   "Where is Rome?", "--answer", "Italy", "--attribution", method,
                   "--levels", "source,sentences,mechanism", "--out", str(out))
        assert got.exit_code == 0, got.output
        recs[method] = json.loads((out / "records.jsonl").read_text().splitlines()[0])
        said = " ".join(got.output.split())        # the console wraps the line
        assert "1 of 1 contexts one sentence: its removal, scored exactly" in said
    rec = recs["ablation"]
    assert rec["attribution_method"] == "leave-one-out" and rec["lds"] is None
    assert rec["n_ablated_prompts"] == 1 and rec["top_sentence"] == 0 and rec["mechanism"]
    assert recs["gradient"]["sentences"] == rec["sentences"]
    model, tok = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    item = Item(id="i", suite="explain", context="Rome is in Italy.",
                question="Where is Rome?", counterfactual_answer="", parametric_answer="")
    cfg = ExplainConfig(prompt_format=rec.get("prompt_format", "auto"))
    sents = split_sentences(item.context)
    both = score_masks(model, tok, item, sents, torch.tensor([[1], [0]]), "Italy", cfg)
    assert rec["sentences"][0]["attribution"] == pytest.approx(float(both[0] - both[1]),
                                                               abs=1e-4)


@pytest.mark.parametrize("masks", ["258", "1000000000000"])
def test_too_many_gradient_mask_points_are_refused_before_the_model_loads(tiny_model_dir,
                                                                            tmp_path, masks):
    """A mask count past `MAX_GRADIENT_MASKS` (a mistyped one ran for hours, or held a
    (points, sentences) tensor past the machine's memory) is one line naming the field and
    the bound, exit 2, nothing written."""
    result = _run(tiny_model_dir, tmp_path, "--context", CONTEXT, "--question",
                  "Where is Rome?", "--answer", "Italy", "--attribution", "gradient",
                  "--set", f"gradient_masks={masks}", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "gradient_masks" in lines[0] and "256" in lines[0], lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag,value", [("--ablations", "4097"), ("--holdout", "10000000000"),
                                        ("--set", "document_ablations=100000")])
def test_too_many_ablations_are_refused_before_the_model_loads(tiny_model_dir, tmp_path, flag,
                                                               value):
    """Each ablation is a forward pass: a count past `MAX_ABLATIONS` (a mistyped one would run
    for days) is one line naming the field and the bound, exit 2, nothing written."""
    result = _run(tiny_model_dir, tmp_path, "--context", CONTEXT, "--question",
                  "Where is Rome?", "--answer", "Italy", flag, value,
                  "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "4096" in lines[0], lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()
