"""Lay out a small NQ-Swap-layout hub dataset, `knowflow-test/nq-swap-mini`, in the `datasets`
cache under HF_HOME, so `--data hf:...` can be shown offline from a clean clone:

    python benchmarks/data/hub_dataset_demo.py /tmp/hf-home
    HF_HOME=/tmp/hf-home HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 \\
        knowflow eval --data hf:knowflow-test/nq-swap-mini --preset nq-swap

The rows have NQ-Swap's columns (pminervini/NQ-Swap: question, org_context, org_answer,
sub_context, sub_answer; the answers are lists) and its one split, `dev`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from knowflow.data.hub_cache import lay_out_hub_dataset

REPO = "knowflow-test/nq-swap-mini"
FACTS = [  # question, original answer, substituted answer, passage with {} for the answer
    ("who wrote the novel frankenstein", "Mary Shelley", "Jane Austen",
     "Frankenstein is an 1818 novel written by English author {} ."),
    ("what is the capital city of canada", "Ottawa", "Winnipeg",
     "{} is the capital city of Canada ."),
    ("who painted the mona lisa", "Leonardo da Vinci", "Claude Monet",
     "The Mona Lisa is a portrait painted by {} ."),
    ("who developed the theory of general relativity", "Albert Einstein", "Niels Bohr",
     "The theory of general relativity was developed by {} between 1907 and 1915 ."),
    ("what is the largest planet in the solar system", "Jupiter", "Saturn",
     "{} is the largest planet in the solar system ."),
    ("who was the first person to walk on the moon", "Neil Armstrong", "Yuri Gagarin",
     "{} was the first person to walk on the moon , in July 1969 ."),
]


def rows() -> list[dict]:
    return [{"question": q, "org_context": f"<P> {text.format(org)} </P>", "org_answer": [org],
             "sub_context": f"<P> {text.format(sub)} </P>", "sub_answer": [sub]}
            for q, org, sub, text in FACTS]


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python benchmarks/data/hub_dataset_demo.py [HF_HOME]")
        return 2
    if not argv:  # `make bench` runs every script bare: lay out in a scratch folder
        with tempfile.TemporaryDirectory() as scratch:
            folder = lay_out_hub_dataset(scratch, REPO, rows(), split="dev")
            print(f"{REPO}: {len(FACTS)} rows, split dev -> {folder} (scratch, removed; "
                  "give HF_HOME to keep it)")
        return 0
    home = Path(argv[0]).expanduser().resolve()
    folder = lay_out_hub_dataset(home, REPO, rows(), split="dev")
    print(f"{REPO}: {len(FACTS)} rows, split dev -> {folder}")
    print(f"HF_HOME={home} HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 "
          f"knowflow eval --data hf:{REPO} --preset nq-swap")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
