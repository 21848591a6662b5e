"""Lay out a tiny random Llama as hub model `knowflow-test/tiny-llama` in a Hugging Face cache
(the layout huggingface_hub writes when it downloads: refs/, snapshots/, blobs/), so that a
transcript loads a hub id with no network and no real download:

    python benchmarks/data/hub_cache_demo.py /tmp/hf-home
    HF_HOME=/tmp/hf-home HF_HUB_OFFLINE=1 knowflow eval --model knowflow-test/tiny-llama \\
        --suite cf-capitals --limit 8 --scoring loglik

Branch `main` holds the model of seed 0 and branch `v2` the model of seed 1 (`--revision v2`).
The model is random: its numbers show the plumbing, not a finding. Uses the tests' helpers
(tests/helpers.py, tests/hub_cache.py), so it needs the dev install (`make setup`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from helpers import byte_tokenizer, tiny_llama  # noqa: E402
from hub_cache import lay_out_hub_model, repo_folder  # noqa: E402

REPO = "knowflow-test/tiny-llama"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hf_home", type=Path, help="The HF_HOME to lay the cache out in.")
    parser.add_argument("--repo", default=REPO, help=f"The hub id to lay out ({REPO}).")
    args = parser.parse_args()
    tok = byte_tokenizer()
    main = lay_out_hub_model(args.hf_home, args.repo, tiny_llama(tok, seed=0), tok)
    v2 = lay_out_hub_model(args.hf_home, args.repo, tiny_llama(tok, seed=1), tok, revision="v2")
    print(f"{args.repo}: main -> {main}, v2 -> {v2}")
    print(f"cache: {repo_folder(args.hf_home, args.repo)}")
    print(f"try: HF_HOME={args.hf_home} HF_HUB_OFFLINE=1 knowflow eval --model {args.repo} "
          "--suite cf-capitals --limit 8 --scoring loglik")


if __name__ == "__main__":
    main()
