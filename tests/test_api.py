"""The public API (knowflow/__init__.py): every name resolves to the function or class it
names, `knowflow.evaluate` and `knowflow.curate` stay functions after their subpackages (and
every other module) are imported, and signatures are the real ones (notebook help works)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import pydoc
import subprocess
import sys

import pytest
import torch

import knowflow
from knowflow.errors import ConfigError

PUBLIC = {
    "augment": ("knowflow.api", "augment"),
    "curate": ("knowflow.api", "curate"),
    "evaluate": ("knowflow.api", "evaluate"),
    "explain": ("knowflow.api", "explain"),
    "finetune": ("knowflow.api", "finetune"),
    "get_suite": ("knowflow.data.suites", "get_suite"),
    "list_experiments": ("knowflow.experiments.registry", "list_experiments"),
    "list_suites": ("knowflow.data.suites", "list_suites"),
    "load_items": ("knowflow.train.tracker", "load_items"),
    "load_model": ("knowflow.lens.load", "load_model"),
    "probe": ("knowflow.api", "probe"),
    "run_experiment": ("knowflow.api", "run_experiment"),
    "write_report": ("knowflow.report.html", "write_report"),
    "Result": ("knowflow.store.result", "Result"),
    "RelianceTracker": ("knowflow.train.tracker", "RelianceTracker"),
    "SFTConfig": ("knowflow.train.sft", "SFTConfig"),
    "TrackerConfig": ("knowflow.train.tracker", "TrackerConfig"),
    "AttentionMassConfig": ("knowflow.probes.mass", "AttentionMassConfig"),
    "AugmentConfig": ("knowflow.train.augment", "AugmentConfig"),
    "CurateConfig": ("knowflow.train.criticality", "CurateConfig"),
    "EvalConfig": ("knowflow.evaluation.options", "EvalConfig"),
    "HeadProjectionConfig": ("knowflow.probes.head_projection", "HeadProjectionConfig"),
    "HeadsConfig": ("knowflow.probes.heads", "HeadsConfig"),
    "KnockoutConfig": ("knowflow.probes.knockout", "KnockoutConfig"),
    "ProjectionConfig": ("knowflow.probes.projection", "ProjectionConfig"),
    "SublayerConfig": ("knowflow.probes.sublayer", "SublayerConfig"),
}


def _import_everything() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(knowflow.__path__, "knowflow.")
             if m.name != "knowflow.__main__"]  # running it runs the CLI
    for name in names:
        importlib.import_module(name)
    return names


def test_all_lists_exactly_the_public_names():
    assert set(knowflow.__all__) == {*PUBLIC, "ConfigError", "DataError", "KnowflowError",
                                     "__version__"}
    assert set(PUBLIC) <= set(dir(knowflow))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_is_the_defining_object(name):
    module, attr = PUBLIC[name]
    obj = getattr(knowflow, name)
    assert obj is getattr(importlib.import_module(module), attr)
    assert inspect.isfunction(obj) or inspect.isclass(obj)
    exec(f"from knowflow import {name} as imported", ns := {})
    assert ns["imported"] is obj


def test_no_subpackage_shadows_a_public_name_after_every_module_is_imported():
    # a subpackage named like a public function would rebind knowflow.<name> on import
    assert len(_import_everything()) > 50
    for name in knowflow.__all__:
        assert f"knowflow.{name}" not in sys.modules, name
        assert not inspect.ismodule(getattr(knowflow, name)), name
    from knowflow import api
    assert api.evaluate is knowflow.evaluate and api.curate is knowflow.curate


def test_signatures_and_help_are_real():
    _import_everything()
    sig = inspect.signature(knowflow.evaluate)
    assert "config" in sig.parameters and "out" in sig.parameters
    entries = (knowflow.evaluate, knowflow.probe, knowflow.curate, knowflow.explain,
               knowflow.finetune, knowflow.augment, knowflow.run_experiment)
    for entry in entries:  # one shape: f(model, data, *, config=None, **overrides)
        params = inspect.signature(entry).parameters
        assert params["config"].kind is inspect.Parameter.KEYWORD_ONLY, entry
        assert params["config"].default is None, entry
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), entry
        assert not any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values())
        assert inspect.signature(entry).return_annotation in ("Result", "EvalResult",
                                                              "CurateResult"), entry
    for entry in entries[:5]:
        assert list(inspect.signature(entry).parameters)[:2] == ["model", "data"], entry
    assert list(inspect.signature(knowflow.augment).parameters)[:1] == ["data"]  # no model
    assert list(inspect.signature(knowflow.run_experiment).parameters)[:1] == ["name"]
    assert list(inspect.signature(knowflow.load_model).parameters)[:1] == ["name"]
    text = pydoc.render_doc(knowflow.evaluate, renderer=pydoc.plaintext)
    assert "evaluate(model=" in text and "args, **kwargs" not in text


def test_importing_knowflow_imports_neither_torch_nor_matplotlib():
    code = ("import sys, knowflow; knowflow.__all__; "
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_suites_and_experiments_are_listed():
    assert "cf-capitals" in knowflow.list_suites()
    items = knowflow.get_suite("cf-capitals", limit=3)
    assert len(items) == 3
    assert {"cpi-toy", "ocr-toy"} <= {e.name for e in knowflow.list_experiments()}


@pytest.fixture
def tiny(tok, make_tiny_llama):
    """(a tiny random Llama, its byte tokenizer)."""
    return make_tiny_llama(tok), tok


FACT = {"prompt": "The Eiffel Tower is located in the city of", "subject": "The Eiffel Tower",
        "answer": "Paris"}


def test_probe_by_name_equals_calling_the_probe_with_its_config(tiny):
    from knowflow.probes import KnockoutConfig, ProbeExample, knockout

    model, tok = tiny
    got = knowflow.probe(model, [FACT], tokenizer=tok, kind="knockout", window=1,
                         known_only=False, source=("subject", "last")).records
    ref = knockout(model, tok, [ProbeExample(**FACT)],
                   KnockoutConfig(window=1, known_only=False, source=("subject", "last")))
    assert len(got) == len(ref) > 0
    for a, b in zip(got, ref, strict=True):
        assert a["source"] == b["source"] and a["layer"] == b["layer"]
        torch.testing.assert_close(a["p"], b["p"])


def test_probe_rejects_unknown_names_and_fields(tiny):
    model, tok = tiny
    with pytest.raises(ConfigError, match="unknown probe 'nope'"):
        knowflow.probe(model, [FACT], tokenizer=tok, kind="nope")
    with pytest.raises(ConfigError) as err:
        knowflow.probe(model, [FACT], tokenizer=tok, kind="knockout", windw=3)
    assert err.value.field == "windw"
    with pytest.raises(ConfigError) as err:
        knowflow.probe(model, [FACT], tokenizer=tok, kind="sublayer", window=0)
    assert err.value.field == "window"
    with pytest.raises(TypeError):  # the legacy form probe(kind, model, tokenizer, examples)
        knowflow.probe("knockout", model, tok, [FACT])
