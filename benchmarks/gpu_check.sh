#!/usr/bin/env bash
# The GPU path in one script: every knowflow command once on a CUDA GPU, checked
# against the CPU on a few items, with throughput per job.
#
#   benchmarks/gpu_check.sh          on a machine with a CUDA GPU (bf16; < 8 minutes on one H100)
#   benchmarks/gpu_check.sh --cpu    smoke test on CPU: tiny limits, float32, a 4-layer random model
#
# Models: SmolLM2-135M-Instruct (the shipped GGUF, converted once) and a random-weight model
# built here from Llama-3.2-1B's config (CPU mode: a 4-layer, 256-wide Llama instead), saved
# with SmolLM2's tokenizer (its vocabulary: 49,152 tokens, so every generated id decodes).
# Nothing is downloaded.
#
# Jobs per model: eval (log-likelihood and generation, one run with --scoring both), explain
# (ablation attribution), probe knockout, probe heads, LoRA sft with the reliance tracker, curate.
#
# Check against the CPU (float32, the same items): eval log-likelihood per item
#   - the choice (counterfactual vs parametric answer) identical, except where the CPU's own
#     margin between the two answers is under 2 x the tolerance below (a near-tie);
#   - each answer's summed log-probability within 0.05 nats per answer token (bf16 vs float32);
#   - generation: identical outputs counted and printed (greedy bf16 may take another branch at a
#     near-tie, so it is reported, not required).
# Every job must exit 0. The script exits 1 if any job fails or a check fails.
# Throughput: wall seconds per job (process start, model load and the job) and items/s.
# Never asserts on time.
set -uo pipefail

MODE=gpu
[[ "${1:-}" == "--cpu" ]] && MODE=cpu
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || make setup || exit 1
PY=.venv/bin/python
KF=.venv/bin/knowflow
export HF_HUB_OFFLINE=1
WORK=$(mktemp -d -t knowflow-gpu-check-XXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/logs"

if [[ $MODE == gpu ]]; then
    DEV=cuda; DTYPE=bfloat16; THREADS=()
    EVAL_LIMIT=32; REF_LIMIT=8; EXPLAIN_LIMIT=4; ABLATIONS=32; KO_LIMIT=16; HEADS_LIMIT=8
    KO_WINDOW=9
    SFT_STEPS=20; SFT_BATCH=8; CURATE_ROWS=64
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
        echo "no CUDA GPU here: run benchmarks/gpu_check.sh --cpu for the CPU smoke test"; exit 1; }
else
    # float32: bf16 matmuls on a CPU are slow and not what the GPU runs; the check then
    # compares float32 with float32 (it exercises the path; the bf16 tolerance is the GPU's).
    DEV=cpu; DTYPE=float32; THREADS=(--threads 1)
    EVAL_LIMIT=1; REF_LIMIT=1; EXPLAIN_LIMIT=1; ABLATIONS=8; KO_LIMIT=1; HEADS_LIMIT=1
    KO_WINDOW=3  # the 4-layer random model: a window no wider than the model
    SFT_STEPS=2; SFT_BATCH=2; CURATE_ROWS=8
fi

echo "gpu_check mode=$MODE device=$DEV dtype=$DTYPE ($(date -u +%FT%TZ))"
"$PY" - <<'EOF'
import torch
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB; torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}")
else:
    print(f"CPU only; torch {torch.__version__}")
EOF

# The random-weight model and the small instruction file curate reads.
"$PY" - "$WORK" "$MODE" "$CURATE_ROWS" <<'EOF' || exit 1
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from knowflow.data.instruction_rows import save_instructions
from knowflow.data.instructions import MixtureConfig, builtin_mixture
from knowflow.lens.load import model_folder

work, mode, rows = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(model_folder("smollm2-135m-instruct"))
# Llama-3.2-1B's config (vocabulary: SmolLM2's tokenizer's); CPU mode: a small Llama.
shape = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, head_dim=64,
             rope_theta=500000.0, tie_word_embeddings=True, max_position_embeddings=131072,
             rope_scaling={"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0,
                           "low_freq_factor": 1.0, "original_max_position_embeddings": 8192})
if mode == "cpu":
    shape = dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                 tie_word_embeddings=True, max_position_embeddings=8192)
config = LlamaConfig(vocab_size=len(tok), rms_norm_eps=1e-5,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, **shape)
torch.manual_seed(0)
# initialised on the GPU in GPU mode (a 1B float32 init on the CPU takes a minute), saved
# float32 so the CPU reference and the bf16 device run read the same weights
with torch.device("cuda" if mode == "gpu" else "cpu"):
    model = LlamaForCausalLM(config)
model.save_pretrained(work / "random-model")
tok.save_pretrained(work / "random-model")
n = sum(p.numel() for p in model.parameters())
print(f"random model: {config.num_hidden_layers} layers, d_model {config.hidden_size}, "
      f"{n / 1e6:.0f}M parameters")
save_instructions(work / "rows.jsonl", builtin_mixture(MixtureConfig(size=rows, seed=0)))
EOF

FAILS=0
RESULTS="$WORK/throughput.tsv"
# job NAME ITEMS COMMAND...: run once, log to $WORK/logs/NAME.log, record seconds.
job() {
    local name=$1 items=$2; shift 2
    local t0 t1 rc
    t0=$EPOCHREALTIME
    "$@" >"$WORK/logs/$name.log" 2>&1
    rc=$?
    t1=$EPOCHREALTIME
    printf '%s\t%s\t%s\t%s\n' "$name" "$items" "$(awk "BEGIN { print $t1 - $t0 }")" "$rc" \
        >>"$RESULTS"
    if [[ $rc -ne 0 ]]; then
        FAILS=$((FAILS + 1))
        echo "FAILED ($rc): $name: $*"
        tail -n 15 "$WORK/logs/$name.log"
    fi
}

for M in smollm2 random; do
    if [[ $M == smollm2 ]]; then MODEL=smollm2-135m-instruct; else MODEL=$WORK/random-model; fi
    D=(--device "$DEV" --dtype "$DTYPE" "${THREADS[@]}")
    job "$M eval (both)" $((EVAL_LIMIT * 2)) "$KF" eval --model "$MODEL" "${D[@]}" \
        --suite cf-capitals,cf-world --limit "$EVAL_LIMIT" --scoring both --no-known-filter \
        --batch-size 0 --out "$WORK/$M-eval"
    job "$M eval cpu reference" $((REF_LIMIT * 2)) "$KF" eval --model "$MODEL" --device cpu \
        --dtype float32 "${THREADS[@]}" --suite cf-capitals,cf-world --limit "$REF_LIMIT" \
        --scoring both --no-known-filter --out "$WORK/$M-eval-cpu"
    job "$M explain ablation" "$EXPLAIN_LIMIT" "$KF" explain --model "$MODEL" "${D[@]}" \
        --suite needle-cf --limit "$EXPLAIN_LIMIT" --levels source,sentences \
        --attribution ablation --ablations "$ABLATIONS" --holdout 4 --out "$WORK/$M-explain"
    job "$M probe knockout" "$KO_LIMIT" "$KF" probe knockout --model "$MODEL" "${D[@]}" \
        --limit "$KO_LIMIT" --all --window "$KO_WINDOW" --out "$WORK/$M-knockout"
    job "$M probe heads" "$HEADS_LIMIT" "$KF" probe heads --model "$MODEL" "${D[@]}" \
        --suite cf-capitals --limit "$HEADS_LIMIT" --ablation zero --rank-by zero \
        --out "$WORK/$M-heads"
    # sft: LoRA, float32 weights (bf16 autocast on GPU: the Trainer's bf16), the tracker on.
    job "$M sft lora+tracker" $((SFT_STEPS * SFT_BATCH)) "$KF" sft --model "$MODEL" \
        --device "$DEV" "${THREADS[@]}" --train lora --steps "$SFT_STEPS" \
        --batch-size "$SFT_BATCH" --max-length 256 --track-every "$SFT_STEPS" --track-limit 2 \
        --runs-dir "$WORK/$M-runs"
    job "$M curate" "$CURATE_ROWS" "$KF" curate --model "$MODEL" "${D[@]}" \
        --data "$WORK/rows.jsonl" --out "$WORK/$M-curated.jsonl"
done

echo
echo "== throughput (wall seconds include process start and model load)"
awk -F'\t' '{ st = ($4 == 0) ? "ok" : "FAILED"; ips = ($3 > 0) ? $2 / $3 : 0;
  printf "%-30s %6d items %8.1f s %8.2f items/s  %s\n", $1, $2, $3, ips, st }' "$RESULTS"
echo "items: eval items (suites x limit), explained answers, knockout prompts, head-sweep items,"
echo "       sft examples (steps x batch), curated rows"

echo
echo "== $DEV $DTYPE vs CPU float32 (eval, the reference's items)"
"$PY" - "$WORK" <<'EOF' || FAILS=$((FAILS + 1))
import json
import sys
from pathlib import Path

TOL = 0.05  # nats per answer token, bf16 vs float32
work = Path(sys.argv[1])
bad = 0
for m in ("smollm2", "random"):
    try:
        dev = {r["id"]: r for r in map(json.loads, open(work / f"{m}-eval/items.jsonl"))}
        cpu = [json.loads(line) for line in open(work / f"{m}-eval-cpu/items.jsonl")]
    except OSError as exc:
        print(f"{m}: no eval records to compare ({exc})")
        bad += 1
        continue
    worst, choice_ok, near_ties, same_gen, n = 0.0, 0, 0, 0, 0
    for c in cpu:
        d = dev.get(c["id"])
        if d is None:
            print(f"{m}: item {c['id']} missing on the device")
            bad += 1
            continue
        n += 1
        for side in ("counterfactual", "parametric"):
            diff = abs(d[f"loglik_{side}_logprob"] - c[f"loglik_{side}_logprob"])
            per_token = diff / max(1, c[f"loglik_{side}_tokens"])
            worst = max(worst, per_token)
            if per_token > TOL:
                print(f"{m}: {c['id']} {side}: {d[f'loglik_{side}_logprob']:.3f} vs CPU "
                      f"{c[f'loglik_{side}_logprob']:.3f} ({per_token:.3f} nats/token > {TOL})")
                bad += 1
        margin = abs(c["loglik_counterfactual_logprob"] - c["loglik_parametric_logprob"])
        if d["loglik_choice"] == c["loglik_choice"]:
            choice_ok += 1
        elif margin < 2 * TOL:
            near_ties += 1
        else:
            print(f"{m}: {c['id']}: choice {d['loglik_choice']} vs CPU {c['loglik_choice']} "
                  f"(CPU margin {margin:.3f} nats)")
            bad += 1
        same_gen += d.get("generate_output") == c.get("generate_output")
    print(f"{m}: {n} items: loglik choices identical {choice_ok}/{n} (near-ties {near_ties}); "
          f"worst logprob difference {worst:.4f} nats/token (tolerance {TOL}); "
          f"generation identical {same_gen}/{n}")
print("check:", "PASS" if bad == 0 else f"FAIL ({bad})")
sys.exit(1 if bad else 0)
EOF

echo
echo "total: ${SECONDS} s wall (setup, both models, every job and the check)"
if [[ $FAILS -ne 0 ]]; then
    echo "gpu_check: $FAILS failure(s); logs were in $WORK/logs (removed on exit; rerun with"
    echo "  KEEP=1 to keep them)"
    [[ "${KEEP:-0}" == 1 ]] && trap - EXIT && echo "kept: $WORK"
    exit 1
fi
echo "gpu_check: all jobs ran and the checks passed"
