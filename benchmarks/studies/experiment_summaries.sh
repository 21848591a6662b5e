#!/usr/bin/env bash
# usage: benchmarks/studies/experiment_summaries.sh SRC_CLONE OUT_DIR
# Every experiment's summary.json (defaults; one seed / few steps for the slow ones), each run
# from an empty KNOWFLOW_CACHE, offline, one thread; compare two clones' OUT_DIRs with
#   for f in A/*.summary.json; do cmp $f B/$(basename $f); done
set -u
SRC=$1; OUT=$2; mkdir -p $OUT
PY=${PY:-$(pwd)/.venv/bin/python}
export PYTHONPATH=$SRC/src HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd $SRC
run() { name=$1; shift; tag=$1; shift
  export KNOWFLOW_CACHE=$(mktemp -d)
  start=$(date +%s)
  nice -n 5 $PY -m knowflow run $name --runs-dir $OUT/runs-$tag "$@" > $OUT/$tag.log 2>&1
  echo "$tag rc=$? $(( $(date +%s)-start ))s" >> $OUT/status.txt
  d=$(ls -d $OUT/runs-$tag/$name/*/ | tail -1); cp $d/summary.json $OUT/$tag.summary.json 2>/dev/null
}
run cpi-toy cpi-toy
run ocr-toy ocr-toy
run inversion-tiny inversion-tiny
run inversion-tiny-heads inversion-tiny-heads --set 'seeds=[0]' --set 'tiny.seeds=[0]'
run sft sft --set sft.steps=10 --set track.every=5 --set track.limit=8 --set mixture.size=100
run ocr-smollm2 ocr-smollm2 --set sft.steps=20 --set eval_every=10 --set world.people_per_family=8
run inversion-smollm2 inversion-smollm2 --set 'arms=lora' --set sft.steps=20 --set track.every=10 --set track.limit=8 --set mixture.size=100 --set workers=1
run inversion-injected inversion-injected --set 'arms=mixed' --set sft.steps=20 --set workers=1
echo done >> $OUT/status.txt
