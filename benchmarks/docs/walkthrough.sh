#!/bin/bash
# What a researcher brings, end to end, offline from a clean checkout with empty caches: model
# folders saved without a tokenizer or with damaged weights, a benchmark by name (absent, then
# laid out in the datasets cache as a download leaves it), an NQ-Swap file missing a column, two
# sft runs reported together, the Python API, a Result as HTML. Run from the checkout after
# `make setup`: bash benchmarks/docs/walkthrough.sh. Prints each command and its exact output.
set -u
export KNOWFLOW_CACHE=$(mktemp -d) HF_HOME=$(mktemp -d) HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
ROOT=$PWD; W=$(mktemp -d); KF=$PWD/.venv/bin/knowflow; PY=$PWD/.venv/bin/python
export PYTHONPATH=$PWD/tests
cd $W
show() { echo "\$ $*"; eval "$@" 2>&1 | grep -v "Writing model shards" ; echo "[exit ${PIPESTATUS[0]}]"; echo; }
$PY - <<'PY'
from helpers import byte_tokenizer, save_model_folder, tiny_llama
import json, pathlib
tok = byte_tokenizer()
save_model_folder(pathlib.Path("tiny"), tiny_llama(tok), tok)
tiny_llama(tok).save_pretrained("no-tokenizer")          # model.save_pretrained only
rows = [{"question": f"Where does Vol{i} live?", "org_context": f"Vol{i} lives in Dor{i}.",
         "sub_context": f"Vol{i} lives in Kem{i}.", "sub_answer": [f"Kem{i}"]} for i in range(4)]
pathlib.Path("nqswap-no-org-answer.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
train = [{"instruction": f"Where does Vol{i} live?", "input": f"Vol{i} lives in Kem{i}.",
          "output": f"Kem{i}", "kind": "C+S" if i % 2 else "C"} for i in range(8)]
pathlib.Path("train-a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
pathlib.Path("conflicts.jsonl").write_text("".join(json.dumps({"question": f"Where does Vol{i} live?", "context": f"Vol{i} lives in Kem{i}.", "counterfactual_answer": f"Kem{i}", "parametric_answer": f"Dor{i}", "subject": f"Vol{i}"}) + "\n" for i in range(4)))
pathlib.Path("train-b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train[::2]))
PY
echo "## 1. A model folder saved without its tokenizer (and other broken folders)"
show $KF eval --model no-tokenizer --suite cf-capitals --limit 2
cp -r tiny garbled; head -c 100 tiny/model.safetensors > garbled/model.safetensors
show $KF eval --model garbled --suite cf-capitals --limit 2
echo "## 2. Benchmarks by name: datasets in the base install; knowflow list; --data nq-swap"
show "$PY -c 'import datasets; print(\"datasets\", datasets.__version__)'"
show $KF list
show $KF eval --model tiny --data nq-swap --limit 4 --scoring loglik --out nq-offline
ROOT=$ROOT $PY - <<'PY'
import sys, os; sys.path.insert(0, os.environ['ROOT'] + '/benchmarks/data')
import hub_dataset_demo as demo, os
from knowflow.data.hub_cache import lay_out_hub_dataset
from knowflow.data.benchmarks import BENCHMARKS
repo = BENCHMARKS["nq-swap"].hub.removeprefix("hf:").split("@")[0]
print(f"(a few rows laid out as {repo} in the datasets cache under HF_HOME, as a download leaves it)")
lay_out_hub_dataset(os.environ["HF_HOME"], repo, demo.rows(), split="dev")
PY
show $KF eval --model tiny --data nq-swap --limit 4 --scoring loglik --out nq
echo "## 3. An NQ-Swap file missing org_answer"
show $KF eval --model tiny --data nqswap-no-org-answer.jsonl --preset nq-swap --scoring loglik --out bad
echo "## 4. Two sft runs, reported together"
show $KF sft --model tiny --data train-a.jsonl --steps 4 --batch-size 4 --track cf-capitals --track-every 2 --track-limit 4 --runs-dir sft-a
show $KF sft --model tiny --data train-b.jsonl --steps 4 --batch-size 4 --track cf-capitals --track-every 2 --track-limit 4 --runs-dir sft-b
show "$KF report sft-a/sft/* sft-b/sft/* --out both"
echo "## 5. The API as its docs say"
show "$PY - <<'PY2'
import knowflow
from knowflow import RelianceTracker, TrackerConfig
model, tok = knowflow.load_model('tiny')
res = knowflow.probe(model, 'conflicts.jsonl', tokenizer=tok, kind='heads')
print('probe heads on a file:', type(res).__name__, res.summary['n_examples'], 'examples')
items = knowflow.get_suite('cf-capitals', limit=10)
print('TrackerConfig(limit=8) with 10 items tracks', len(RelianceTracker(tok, TrackerConfig(limit=8), items=items).items['cf-capitals']))
ev = knowflow.evaluate(model, 'cf-capitals', tokenizer=tok, scoring='loglik', limit=4)
print('summary keys:', sorted(ev.summary['cf-capitals']['loglik']))
PY2"
show "$PY -c \"import json; print([(r['step'], r.get('train_loss')) for r in map(json.loads, open(next(__import__('pathlib').Path('sft-a').glob('sft/*/metrics.jsonl'))))])\""
echo "## 6. A Result in a notebook"
show "$PY -c \"import knowflow; m,t=knowflow.load_model('tiny'); r=knowflow.evaluate(m,'cf-capitals',tokenizer=t,scoring='loglik',limit=4); h=r._repr_html_(); print(len(h), 'characters of HTML;', h[:160])\""
