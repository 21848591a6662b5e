"""The valid-input corpus: files as other tools save them (a UTF-8 byte-order mark from Excel
or Notepad, CRLF line ends, cells longer than csv's default limit, non-ASCII paths) that every
command must read and run on (exit code 0)."""

from __future__ import annotations

import json
from pathlib import Path

from corpus.cases import Case
from corpus.files import _instructions, _items, write_models

BOM = "\ufeff"
M = "--model {model}"
EVAL = f"eval {M} --scoring loglik --no-known-filter --out out --data"


def _crlf(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows)


def _csv(rows: list[dict], extra: str = "") -> str:
    head = ",".join([*rows[0], *(["notes"] if extra else [])])
    body = "".join(",".join([*(f'"{v}"' for v in r.values()), *([extra] if extra else [])])
                   + "\r\n" for r in rows)
    return head + "\r\n" + body


def write_valid(root: Path) -> None:
    items, rows = _items(3), _instructions(8)
    files = {
        "bom.jsonl": BOM + _crlf(items),
        "bom.json": BOM + json.dumps(items, indent=2).replace("\n", "\r\n"),
        "excel.csv": BOM + _csv(items),
        "long.csv": _csv(items, extra="x" * 140_000),  # a cell over csv's 131,072 limit
        "données/évaluation ü.jsonl": _crlf([{**it, "context": it["context"] + " — café"}
                                              for it in items]),
        "bom-train.jsonl": BOM + _crlf(rows),
        # raw line/paragraph separators inside strings, as json.dumps(ensure_ascii=False)
        # and pandas write them: valid JSON, not line ends
        "separators.jsonl": _crlf([{**it, "context": it["context"] + " \u2028 \u2029 \x85"}
                                   for it in items]),
        "separators-train.jsonl": _crlf([{**r, "input": r["input"] + "\u2028"} for r in rows]),
        # answers with no word generation could match: log-likelihood scores them (a
        # multiple-choice letter, an article), generation leaves the items out
        "wordless.jsonl": _crlf([items[0], {**items[1], "answer": "???"},
                                 {**items[2], "memory_answer": "The"}]),
        "bom-prompts.jsonl": BOM + _crlf([{"prompt": "The capital of France is",
                                           "subject": "France", "answer": "Paris"}]),
    }
    files.update(_answer_text_files(items))
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8", newline="")
    write_models(root)


def _answer_text_files(items: list[dict]) -> dict[str, str]:
    """Answers read by the one answer-text rule: zero-width and control characters
    inside, an NFD accent, one item whose answers are one word in NFC and NFD (skipped), a
    case-only pair (scored by log-likelihood, skipped by generation) and 200,000 aliases."""
    odd = [{**items[0], "answer": "Zo\u200brb\u00000", "memory_answer": "Pa\u0301ris0"},
           {**items[1], "answer": "Ze\u0301nith", "memory_answer": "Z\u00e9nith"},
           {**items[2], "answer": "PARIS2", "memory_answer": "paris2"}]
    many = {**items[0], "answer_aliases": [f"Zorb {i}" for i in range(200_000)]}
    return {"answers.jsonl": _crlf([*odd, *items]),
            "aliases.jsonl": _crlf([many, *items[1:]])}


VALID = [
    Case(f"{EVAL} bom.jsonl", 0, "results: out"),
    Case(f"{EVAL} bom.json", 0, "results: out"),
    Case(f"{EVAL} excel.csv", 0, "results: out"),
    Case(f"{EVAL} long.csv", 0, "results: out"),
    Case(f"eval {M} --scoring loglik --no-known-filter --out résultats --data "
         "'données/évaluation ü.jsonl'", 0, "results: résultats"),
    Case(f"{EVAL} separators.jsonl", 0, "results: out"),
    Case(f"eval {M} --scoring both --no-known-filter --out out --data wordless.jsonl", 0,
         "results: out"),
    Case(f"eval {M} --scoring both --max-new-tokens 2 --no-known-filter --out out --data "
         "answers.jsonl", 0, "results: out"),
    Case(f"eval {M} --scoring generate --max-new-tokens 2 --no-known-filter --out out --data "
         "aliases.jsonl", 0, "results: out"),
    Case("augment --data bom-train.jsonl --out 'données/augmenté.jsonl'", 0,
         "counterfactual"),
    Case("augment --data separators-train.jsonl --out sep.jsonl", 0, "counterfactual"),
    Case(f"sft {M} --data bom-train.jsonl --steps 1 --batch-size 4 --no-track "
         "--max-length 512 --runs-dir 'données/runs'", 0, "run directory"),
    Case(f"probe knockout {M} --data bom-prompts.jsonl --window 1 --all --out 'sondé ü'", 0,
         "run directory"),
    # near-misses of the broken model folders (`corpus.cases.MODEL_CASES`): special tokens
    # added within padded embedding rows, another chat template that renders, sharded weights
    *(Case(f"eval --model models/{name} --prompt-format chat --scoring loglik "
           "--no-known-filter --out out --data bom.jsonl", 0, "results: out")
      for name in ("padded-vocab", "own-template", "sharded")),
]
