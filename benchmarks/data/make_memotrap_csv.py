"""Write a MemoTrap-format CSV (`prompt`, `classes`, `answer_index`; MemoTrap's proverb-ending
wording) from knowflow's sayings table, for machines without the real MemoTrap file.

    python benchmarks/data/make_memotrap_csv.py [OUT.csv] [--seed 0]
    # default runs/memotrap-format.csv

Each row asks for a saying to end in another word; the classes are the memorized ending and
that word, in a seeded order. It is not MemoTrap's data, only its format and wording.
"""

import argparse
import csv
import random
from pathlib import Path

from knowflow.data.suites import get_suite


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="runs/memotrap-format.csv")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt", "classes", "answer_index"])
        for it in get_suite("cf-quotes", seed=args.seed):
            classes = [f" {it.parametric_answer}", f" {it.counterfactual_answer}"]
            if random.Random(f"{args.seed}:{it.id}").random() < 0.5:
                classes.reverse()
            prompt = f'Write a quote that ends in the word "{it.counterfactual_answer}": ' \
                     f"{it.question}"
            w.writerow([prompt, repr(classes), classes.index(f" {it.counterfactual_answer}")])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
