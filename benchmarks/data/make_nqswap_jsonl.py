"""Write an NQ-Swap-format JSON-lines file (`question`, `org_context`, `org_answer`,
`sub_context`, `sub_answer`; NQ's lower-case questions and `<P> ... </P>` paragraphs) from a
built-in counterfactual suite, for machines without the real NQ-Swap file.

    python benchmarks/data/make_nqswap_jsonl.py [OUT.jsonl] [--suite cf-bio] [--seed 0]
    # default runs/nqswap-format.jsonl; `knowflow eval/explain --data OUT.jsonl` read it

`sub_context` is the suite's counterfactual context, `org_context` its agreeing context; the
answers carry their aliases. It is not NQ-Swap's data, only its layout.
"""

import argparse
import json
from pathlib import Path

from knowflow.data.suites import get_suite


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="runs/nqswap-format.jsonl")
    ap.add_argument("--suite", default="cf-bio")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        for it in get_suite(args.suite, seed=args.seed):
            row = {"question": it.question.rstrip("?").strip().lower(),
                   "org_context": f"<P> {it.meta['agreeing_context']} </P>",
                   "org_answer": [it.parametric_answer, *it.parametric_aliases],
                   "sub_context": f"<P> {it.context} </P>",
                   "sub_answer": [it.counterfactual_answer, *it.counterfactual_aliases]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
