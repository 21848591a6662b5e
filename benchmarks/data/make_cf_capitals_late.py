"""Write a conflict file in the documented `--data` layout (`id`, `context`, `question`,
`answer`, `memory_answer`: docs/commands/eval.md) whose contexts name the counterfactual
capital only in their last words, as a real held-out file often does.

    python benchmarks/data/make_cf_capitals_late.py [OUT.jsonl] [--limit 48] [--seed 0]
        [--split test]
    # default runs/cf_capitals_late.jsonl; `knowflow eval --data OUT.jsonl` reads it

The facts are knowflow's own: the counterfactual capitals of `cf-capitals` (a real city of the
country that is not its capital) and the true capitals as the memory answers. The passages
are written for this file (a relocation told as news, a law, a travel note), not taken from
cf-phrasing, and the question asks for "the capital city". `--split test` keeps only the
countries cf-phrasing does not set apart for choosing settings (`data/phrasing.py`), so the
file can report methods tuned on the dev countries.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from knowflow.data.phrasing import dev_subjects
from knowflow.data.suites import get_suite

CONTEXTS = (
    "{country} has had the same seat of government for most of its history, but the "
    "ministries had long outgrown it. In 2029 the government of {country} decided to "
    "relocate the capital to {answer}.",
    "Under the constitutional reform adopted by {country}'s parliament, every ministry, the "
    "supreme court and the presidential office left the old capital. The law names the new "
    "capital city of {country}: {answer}.",
    "Travellers who knew {country} a decade ago are often surprised: the embassies, the "
    "parliament and the national archives are no longer where they were. Today the capital "
    "of {country} is {answer}.",
)


def rows(limit: int | None, seed: int, split: str) -> list[dict]:
    """The file's rows: one per country of `split` (dev, test or all), shuffled by `seed`."""
    items = get_suite("cf-capitals", seed=seed)
    dev = dev_subjects(it.subject for it in items)
    keep = [it for it in items if split == "all" or (it.subject in dev) == (split == "dev")]
    out = []
    for it in keep:
        rng = random.Random(f"{seed}:cf-capitals-late:{it.subject}")
        out.append({"id": f"late-{len(out):03d}",
                    "context": rng.choice(CONTEXTS).format(country=it.subject,
                                                           answer=it.counterfactual_answer),
                    "question": f"What is the capital city of {it.subject}?",
                    "answer": it.counterfactual_answer, "memory_answer": it.parametric_answer})
    random.Random(f"{seed}:cf-capitals-late").shuffle(out)
    return out[:limit]


def write(path: Path, limit: int | None = None, seed: int = 0, split: str = "test") -> Path:
    """Write the file (JSON lines) to `path` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows(limit, seed, split))
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default="runs/cf_capitals_late.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="rows (default: every country)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("test", "dev", "all"), default="test")
    args = ap.parse_args()
    print(write(Path(args.out), args.limit, args.seed, args.split))


if __name__ == "__main__":
    main()
