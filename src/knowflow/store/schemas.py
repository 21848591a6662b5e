"""The schemas of the structured files knowflow reads back, declared once, and the one check.

A file read at an input boundary (a run folder's `run.json`, `config.json`, `summary.json` and
records that `knowflow report` and `--resume` read; an lm-eval `--log_samples` file that
`knowflow eval --from-lm-eval` reads) is checked against its schema where it is read, before a
model loads and before anything is written, so a wrong type is one `DataError` naming the file,
the line (JSONL) and the field, not a KeyError deep inside a reader. The schemas are pydantic
models and type adapters; `check` turns pydantic's first error into that message, its `loc`
written as a field path (`doc.suite`, `choices[1]`). Extra fields are kept: a schema states
what its reader needs, not everything a file may hold.

Whole numbers read back (steps, counts, indices: `Count`) are range-checked where they are
read, from 0 to `MAX_COUNT`, so a step of a thousand digits is refused by file, line and field
rather than overflowing in a figure or a sum later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from knowflow.errors import DataError
from knowflow.store.readers import decode_json, jsonl_lines, read_json, read_text

MAX_COUNT = 2**53
"""The largest step, count or index a file knowflow reads back may hold: the largest whole
number a float64 holds exactly (figures, means and JSON readers in other languages turn
numbers into floats), far beyond any step or count a run reaches."""


def whole(low: int = 0, high: int = MAX_COUNT) -> Any:
    """The type of a whole number from `low` to `high`; outside, pydantic's error names
    the range."""
    def in_range(value: int) -> int:
        if not low <= value <= high:
            raise PydanticCustomError("out_of_range", "must be a whole number from {low} to "
                                      "{high}", {"low": low, "high": high})
        return value

    return Annotated[StrictInt, AfterValidator(in_range)]


Count = whole()
"""A step, a count or an index: a whole number from 0 to `MAX_COUNT`."""


class _Record(BaseModel):
    """A JSON object whose named fields have the declared types; other fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)


class RunIdentity(_Record):
    """`run.json`, the marker every run folder knowflow writes carries (outputs.IDENTITY)."""

    command: Annotated[str, Field(min_length=1)]
    config_sha256: str | None = None  # the hash of config.json (`--resume` requires it)
    in_progress: StrictBool = False


class MetricRecord(_Record):
    """One line of an experiment's or an sft run's `metrics.jsonl` (one per evaluation)."""

    step: Count | None = None


class TrainerState(_Record):
    """A Trainer checkpoint's `trainer_state.json`, as `--resume` reads it."""

    global_step: Count


class StepRecord(_Record):
    """One line of the `metrics.jsonl` an `EvalCallback` writes and reads back on resume."""

    step: Count


Share = Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)]


class TrackerRecord(StepRecord):
    """One line of a RelianceTracker's `metrics.jsonl` (a tracker folder `report` reads):
    accuracies are shares of the `n` items scored at that step."""

    cf_acc: Share
    param_acc: Share | None = None
    cf_acc_gen: Share | None = None
    param_acc_gen: Share | None = None
    attn_context: StrictFloat | None = None
    train_loss: StrictFloat | None = None
    n: whole(1) | None = None


class ItemRecord(_Record):
    """One line of an eval's `items.jsonl` or `conditions.jsonl` (one per item and method);
    the eval page groups them by suite and method and counts the scored answers."""

    suite: str
    method: str | None = None
    generate_counterfactual: StrictBool | None = None
    generate_parametric: StrictBool | None = None
    loglik_choice: str | None = None

    @model_validator(mode="after")
    def _both_generated(self) -> ItemRecord:
        if (self.generate_counterfactual is None) != (self.generate_parametric is None):
            raise ValueError("generate_counterfactual and generate_parametric come together")
        return self


Interval = tuple[StrictFloat, StrictFloat]


class HeadEffect(_Record):
    """One ranked head of a heads probe: its change in log-odds and 95% interval."""

    layer: Count
    head: Count
    effect: StrictFloat
    ci: Interval | None = None


class RankedHeads(_Record):
    context_heads: list[HeadEffect] = []
    memory_heads: list[HeadEffect] = []


class HeadAttention(HeadEffect):
    """A top head's attention from the answer position over the example's tokens."""

    side: str
    context_mass: StrictFloat
    weights: list[StrictFloat]


class ExampleAttention(_Record):
    example: str
    tokens: list[str]
    context: list[Count] = []
    heads: list[HeadAttention] = []

    @model_validator(mode="after")
    def _one_weight_per_token(self) -> ExampleAttention:
        if any(len(h.weights) != len(self.tokens) for h in self.heads):
            raise ValueError("each head needs one weight per token")
        return self


class HeadsSummary(RankedHeads):
    """A heads probe's `summary.json`, as its report page reads it."""

    n_examples: Count = 0
    rank_by: str = "mean"
    mean_log_odds: StrictFloat | None = None
    half_effect_heads: dict[str, Any] | None = None
    effects: dict[str, RankedHeads] | None = None
    example_attention: ExampleAttention | None = None
    projection: dict[str, list[list[StrictFloat]]] | None = None


class SentenceRecord(_Record):
    text: str
    attribution: StrictFloat


class LayerEffect(_Record):
    context: StrictFloat
    top_sentence: StrictFloat


class MechanismHead(_Record):
    layer: Count
    head: Count
    attention: StrictFloat
    effect: StrictFloat


class Mechanism(_Record):
    layers: list[LayerEffect]
    heads: list[MechanismHead]


class VerdictNumbers(_Record):
    context_contribution: StrictFloat
    context_supports: Any
    memory_agrees: Any


class OnePass(_Record):
    one_pass_top: Count | None


class ExplainRecord(_Record):
    """One line of an explain run's `records.jsonl`, as its report card reads it; sentence
    attribution (`sentences` with its top sentence and drops), its one-pass check
    (`one_pass`, `--levels ...,one_pass`) and `mechanism` are there when they were
    computed."""

    id: str
    question: str
    answer: str
    answer_no_context: str
    unexplained: str | None = None     # why the answer was not explained (then no verdict)
    logprob_context: StrictFloat | None
    logprob_no_context: StrictFloat | None
    verdict: str | None
    verdict_numbers: VerdictNumbers | None
    expected_verdict: str | None = None
    verdict_agrees: StrictBool | None = None
    # a None default without None in the type: the field may be absent, but never null
    sentences: list[SentenceRecord] = None
    top_sentence: Count | None = None
    topk_drop: dict[str, StrictFloat] = None
    one_pass: OnePass = None
    lds: StrictFloat | None = None
    mechanism: Mechanism = None

    @model_validator(mode="after")
    def _attribution_parts(self) -> ExplainRecord:
        if self.unexplained is None:
            missing = [f for f in ("logprob_context", "logprob_no_context", "verdict",
                                   "verdict_numbers") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"an explained record needs {', '.join(missing)}")
        if "sentences" in self.model_fields_set:
            missing = [f for f in ("top_sentence", "topk_drop")
                       if f not in self.model_fields_set]
            if missing:
                raise ValueError(f"a record with sentences needs {', '.join(missing)}")
        return self


class SentenceScores(_Record):
    lds: StrictFloat | None = None
    hit_rate: StrictFloat | None = None


class LayerCurves(_Record):
    context: list[StrictFloat]
    top_sentence: list[StrictFloat]


class ExplainSummary(_Record):
    """An explain run's `summary.json`, as its report page reads it (null: not measured)."""

    verdicts: dict[str, Any] | None = None
    agreement: StrictFloat | None = None
    sentences: SentenceScores | None = None
    mechanism: LayerCurves | None = None


class LmEvalDoc(_Record):
    """The document of a task `knowflow export lm-eval` wrote (`task_docs`): an item's fields,
    its prompt and its two scored continuations (memorized, context)."""

    id: str
    suite: Annotated[str, Field(min_length=1)]
    context: str
    question: str
    counterfactual_answer: str
    parametric_answer: str
    counterfactual_aliases: list[str] = []
    parametric_aliases: list[str] = []
    task: Literal["qa", "complete"] = "qa"
    relation: str = ""
    subject: str = ""
    choices: Annotated[list[str], Field(min_length=2, max_length=2)]


class LmEvalSample(_Record):
    """One line of an lm-eval `--log_samples` file of such a task (its responses are read by
    `evaluation.lm_eval_task`, which accepts both of lm-eval's response shapes)."""

    doc: LmEvalDoc
    doc_id: Count | None = None
    acc: StrictFloat | None = None



JSON_OBJECT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
EVAL_SUMMARY: TypeAdapter[dict[str, dict[str, Any]]] = TypeAdapter(dict[str, dict[str, Any]])
"""An eval's `summary.json`: per suite, per scoring mode, its metrics."""


def result_schemas(command: str | None) -> dict[str, type[BaseModel] | TypeAdapter]:
    """The schema of each result file a finished run of `command` (its run.json's) may hold,
    as `knowflow report` reads it (a JSONL file's: of each line)."""
    return {"summary.json": {"eval": EVAL_SUMMARY, "probe-heads": HeadsSummary,
                             "explain": ExplainSummary}.get(command, JSON_OBJECT),
            "items.jsonl": ItemRecord, "conditions.jsonl": ItemRecord,
            "records.jsonl": ExplainRecord if command == "explain" else JSON_OBJECT,
            "conditions.json": JSON_OBJECT}


# pydantic's error types, said in JSON's words
_SAID = {"missing": "is missing", "string_type": "must be a string",
         "int_type": "must be an integer", "int_from_float": "must be an integer",
         "int_parsing": "must be an integer", "bool_type": "must be true or false",
         "float_type": "must be a number", "float_parsing": "must be a number",
         "list_type": "must be a list", "dict_type": "must be a JSON object",
         "model_type": "must be a JSON object", "model_attributes_type": "must be a JSON object",
         "too_short": "must have at least {min_length} items",
         "too_long": "must have at most {max_length} items",
         "string_too_short": "must have at least {min_length} character(s)",
         "greater_than_equal": "must be at least {ge}", "less_than_equal": "must be at most {le}",
         "finite_number": "must be a finite number", "value_error": "{error}"}


def _field(loc: tuple) -> str | None:
    parts = ""
    for part in loc:
        parts += f"[{part}]" if isinstance(part, int) else f".{part}" if parts else str(part)
    return parts or None


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _message(error: dict) -> str:
    kind = error["type"]
    said = _SAID[kind].format(**error.get("ctx", {})) if kind in _SAID else \
        error["msg"].replace("Input should", "must", 1)
    if kind in ("missing", "value_error"):
        return said
    return f"{said}, got {_shown(error['input'])}"


def check(schema: type[BaseModel] | TypeAdapter, value: Any, path: str | Path,
          line: int | None = None, hint: str | None = None) -> Any:
    """`value` (read from `path`, at `line` of a JSONL file) validated by `schema`: a model
    instance, or the value itself for a type adapter. A mismatch is a `DataError` naming the
    file, the line and the field of the first error."""
    adapter = schema if isinstance(schema, TypeAdapter) else None
    try:
        if adapter is not None:
            return adapter.validate_python(value)
        return schema.model_validate(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise DataError(path, _message(error), line=line, field=_field(error["loc"]),
                        hint=hint) from None


def read_checked(path: str | Path, schema: type[BaseModel] | TypeAdapter,
                 hint: str | None = None) -> Any:
    """A JSON file knowflow wrote (`io.read_json`), checked by `schema`."""
    return check(schema, read_json(path, hint=hint), path, hint=hint)


def read_checked_lines(path: str | Path, schema: type[BaseModel] | TypeAdapter,
                       hint: str | None = None) -> list:
    """A JSONL file knowflow wrote (`io.read_jsonl`), each line checked by `schema`."""
    return [check(schema, decode_json(text, path, line=n, what="damaged JSON line", hint=hint,
                                      strict=False), path, line=n, hint=hint)
            for n, text in jsonl_lines(read_text(path, hint)) if text.strip()]
