"""`ocr-smollm2`: out-of-context reasoning in a real language model (Huang et al. 2025, sec. 3).

SmolLM2-135M-Instruct is finetuned, through knowflow's SFT path (`train.sft.train_model`, the HF
Trainer; full, LoRA or QK-only), on plain sentences about made-up people (`data.people`):
every person's fact, and the implication of only the training people (20%). Causal LM loss on
whole sentences. Every `eval_every` steps a Trainer callback ranks, for each person, the
correct implication among its family's candidates by log-likelihood (of the answer's tokens,
or with `eval_suffix` of the completed sentence; and of its first token: `evaluation.rank`).
Held-out people measure out-of-context inference, training people check that the shown
implications were learned, and the facts' own ranks check that the facts were.
If causal and non-causal families fall alike, generalization and hallucination are one
mechanism, as the paper argues.

`model` is any HF causal LM (name or folder) or `tiny`: a knowflow tiny Llama
(`experiments.inversion_tiny.model.make_model`, sized by `tiny`) with a word-level tokenizer over
this world's
words, trained from scratch on the same text: no prior knowledge, so every family is an
arbitrary pairing for it (400 steps at lr 3e-3 take ~15 s:
`knowflow run ocr-smollm2 --set model=tiny --set sft.lr=3e-3 --set sft.steps=400
--set eval_every=50`). `--resume` continues from the last Trainer checkpoint and keeps the
evaluation records up to it.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from knowflow.config import require
from knowflow.data.people import EvalItem, OcrPeopleConfig, OcrPeopleData, generate
from knowflow.errors import ConfigError
from knowflow.evaluation.rank import grouped_stats, rank_candidates, ranks_from_scores, summarize
from knowflow.experiments.inversion_tiny.model import TinyModelConfig, make_model
from knowflow.experiments.inversion_tiny.world import BOS, EOS, PAD, SPECIALS, UNK
from knowflow.experiments.ocr_smollm2.figures import plot_ocr_smollm2
from knowflow.experiments.ocr_smollm2.rank_table import family_ranks
from knowflow.experiments.registry import Summary, register
from knowflow.lens.load import SMOLLM2, load_model
from knowflow.train.callback import EvalCallback
from knowflow.train.sft import CHECKPOINTS, SFTConfig, train_model

log = logging.getLogger(__name__)

TINY = "tiny"


def _default_world() -> OcrPeopleConfig:
    # 5 families x 20 people (4 pairs x 5 people: 1 shown, 4 held out) = 100 people, 240
    # sentences (two paraphrases per fact and per shown implication)
    return OcrPeopleConfig(pairs_per_family=4, people_per_family=20)


def _default_sft() -> SFTConfig:
    # 150 steps of 16 sentences = 10 epochs: enough to memorize the facts at this lr (about 7
    # epochs at 2e-4 in a probe); ~3-5 s a step on one CPU thread
    return SFTConfig(train="full", lr=3e-4, warmup_steps=10, steps=150, batch_size=16,
                     max_length=48, save_every=75, save_limit=1, log_every=5,
                     prompt_format="plain")


@dataclass(frozen=True)
class OcrSmolConfig:
    model: str = SMOLLM2  # an HF causal LM (name or folder), or "tiny" (from scratch)
    device: str = "auto"
    dtype: str = "float32"  # weights; training mixed precision is the SFT path's business
    threads: int = 1  # torch threads (one is fastest for small models on a shared CPU)
    eval_every: int = 25  # optimizer steps between evaluations (also at step 0 and the end)
    eval_batch_size: int = 32
    eval_suffix: bool = False  # score the rest of the sentence after the answer too
    keep_checkpoints: bool = False  # keep the Trainer checkpoints once the run is done
    world: OcrPeopleConfig = field(default_factory=_default_world)
    sft: SFTConfig = field(default_factory=_default_sft)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)  # model = "tiny" only

    def validate(self) -> None:
        self.world.validate("world.")
        try:
            self.sft.validate()
        except ConfigError as exc:
            raise exc.under("sft.") from None
        require(self.eval_every >= 1, "eval_every", "must be at least 1")
        require(self.eval_batch_size >= 1, "eval_batch_size", "must be at least 1")
        require(self.threads >= 1, "threads", "must be at least 1")
        require(bool(self.model.strip()), "model", "give a model name or folder")
        if self.model == TINY:
            t = self.tiny
            require(min(t.layers, t.heads, t.d_model, t.d_ff) >= 1, "tiny",
                    "layers, heads, d_model and d_ff must be at least 1")
            require(t.d_model % t.heads == 0, "tiny.d_model", "must be divisible by heads")


# --- model and data ---------------------------------------------------------------------

def _words(texts: Sequence[str]) -> list[str]:
    from tokenizers.pre_tokenizers import Whitespace

    pre = Whitespace()
    return sorted({w for t in texts for w, _ in pre.pre_tokenize_str(t)})


def tiny_model(cfg: OcrSmolConfig, data: OcrPeopleData):
    """A from-scratch knowflow tiny Llama and a word-level tokenizer over the world's words
    (words and punctuation split as `tokenizers`' Whitespace pre-tokenizer does)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    texts = [*data.train_texts, *(it.sentence(c) for it in data.eval_items
                                  for c in it.candidates)]
    vocab = [*SPECIALS, *_words(texts)]  # PAD, UNK, BOS, EOS = 0..3, as make_model expects
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=UNK))
    core.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                        pad_token=PAD, unk_token=UNK)
    model = make_model(cfg.tiny, len(vocab), cfg.sft.max_length, cfg.sft.seed)
    return model.eval(), tokenizer


def load(cfg: OcrSmolConfig, data: OcrPeopleData):
    if cfg.model == TINY:
        return tiny_model(cfg, data)
    return load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)


def encode_texts(tokenizer, texts: Sequence[str], max_length: int) -> list[dict]:
    """Plain-text examples: every token (and a closing EOS) carries the loss."""
    out = []
    for text in texts:
        ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
        out.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": list(ids)})
    longest = max(len(x["input_ids"]) for x in out)
    if longest > max_length:
        n = sum(len(x["input_ids"]) > max_length for x in out)
        raise ConfigError(f"{n} training sentences are longer than {max_length} tokens "
                          f"(longest: {longest}); raise it", "sft.max_length")
    return out


# --- evaluation -------------------------------------------------------------------------

def _group(item: EvalItem) -> str:
    return f"{item.split}_{'impl' if item.kind == 'implication' else 'fact'}"


class RankEvaluator:
    """Ranks every evaluation item with a model and returns one flat record."""

    def __init__(self, tokenizer, items: Sequence[EvalItem], batch_size: int,
                 with_suffix: bool = False):
        self.tokenizer, self.items, self.batch_size = tokenizer, list(items), batch_size
        self.prompts = [tokenizer(it.prompt)["input_ids"] for it in self.items]
        self.continuations = [it.continuations(with_suffix) for it in self.items]

    def __call__(self, model) -> dict:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        ranks = rank_candidates(base, self.tokenizer, self.prompts, self.continuations,
                                [it.correct for it in self.items], self.batch_size)
        k = [len(it.candidates) for it in self.items]
        rec: dict = {}
        for keys in ([(it.family, _group(it)) for it in self.items],
                     [("all", _group(it)) for it in self.items]):
            table = summarize(keys, ranks, k, name="/".join)
            for name, stats in sorted(table.items()):
                rec.update({f"{name}/{s}": v for s, v in stats.items()})
        rec.update(self._prior(ranks.full_scores))
        return rec

    def _prior(self, scores: list[list[float]]) -> dict:
        """Counterfactual families: `prior_mean_rank` / `prior_top1` of the real-world
        implication (Amsterdam -> Dutch), which the trained mapping contradicts."""
        idx = [i for i, it in enumerate(self.items) if it.prior_answer]
        if not idx:
            return {}
        items = [self.items[i] for i in idx]
        ranks = ranks_from_scores([scores[i] for i in idx],
                                  [it.candidates.index(it.prior_answer) for it in items])
        stats = grouped_stats([(it.family, _group(it)) for it in items], ranks,
                              [len(it.candidates) for it in items])
        return {f"{fam}/{group}/prior_{s}": getattr(st, s) for (fam, group), st in stats.items()
                for s in ("mean_rank", "top1")}


# --- the run ----------------------------------------------------------------------------

def _summary(cfg: OcrSmolConfig, data: OcrPeopleData, records: list[dict], n_tokens: int,
             train_seconds: float, result) -> Summary:
    causal = {f.name: f.causal for f in data.families}
    table = family_ranks(records, causal)
    fams = [table[f.name] for f in data.families if f.name in table]

    def mean_gain(is_causal: bool) -> float:
        rows = [r for r in fams if r["causal"] == is_causal]
        return (sum(r["mean_rank_before"] - r["mean_rank_after"] for r in rows) / len(rows)
                if rows else float("nan"))

    evals = [r["eval_seconds"] for r in records]
    summary = {"model": cfg.model, "train": cfg.sft.train, "steps": result.steps,
               "n_people": len(data.people), "n_train_texts": len(data.train_texts),
               "n_eval_items": len(data.eval_items), "train_tokens": n_tokens,
               "train_seconds": train_seconds,
               "train_tokens_per_s": n_tokens / train_seconds if train_seconds > 0 else None,
               "eval_seconds_per_pass": sum(evals) / len(evals),
               "final_train_loss": result.train_loss,
               "causal_mean_rank_gain": mean_gain(True),
               "noncausal_mean_rank_gain": mean_gain(False),
               **table}
    summary["findings"] = findings(summary)
    return summary


def findings(summary: dict) -> dict:
    """The paper's claim (causal and non-causal implications are inferred alike), read from
    the mean rank gains (before minus after: > 0 means the implied answer moved up)."""
    causal, other = summary["causal_mean_rank_gain"], summary["noncausal_mean_rank_gain"]
    if math.isnan(causal) or math.isnan(other):
        reading = "only one kind of family was evaluated, so the claim is not tested"
    elif causal > 0 and other > 0:
        reading = ("both kinds are inferred: generalization and hallucination alike, as the "
                   "paper finds")
    elif causal > 0:
        reading = "only causal implications are inferred, unlike the paper"
    elif other > 0:
        reading = "only non-causal implications are inferred, unlike the paper"
    else:
        reading = "no out-of-context inference"
    verdict = (f"After {summary['steps']} finetuning steps the mean rank of held-out "
               f"implications improves by {causal:+.2f} in causal and {other:+.2f} in "
               f"non-causal families: {reading}.")
    return {"verdict": verdict, "causal_mean_rank_gain": causal,
            "noncausal_mean_rank_gain": other}


@register("ocr-smollm2", OcrSmolConfig, plot_ocr_smollm2,
          "Out-of-context reasoning in SmolLM2: made-up people, mean rank of implications",
          columns=("n_candidates", "mean_rank_before", "mean_rank_after",
                   "train_mean_rank_after", "fact_mean_rank_after", "top1_after"))
def run(cfg: OcrSmolConfig, out_dir: Path) -> Summary:
    import torch

    torch.set_num_threads(cfg.threads)
    cfg.validate()
    out_dir = Path(out_dir)
    data = generate(cfg.world)
    model, tokenizer = load(cfg, data)
    dataset = encode_texts(tokenizer, data.train_texts, cfg.sft.max_length)
    evaluate = RankEvaluator(tokenizer, data.eval_items, cfg.eval_batch_size, cfg.eval_suffix)
    tracker = EvalCallback(evaluate, cfg.eval_every, out_dir)
    result = train_model(model, tokenizer, dataset, cfg.sft, out_dir, callbacks=[tracker],
                      resume=True)
    records = tracker.records
    if not cfg.keep_checkpoints:
        shutil.rmtree(out_dir / CHECKPOINTS, ignore_errors=True)
    per_step = cfg.sft.batch_size * cfg.sft.grad_accum
    mean_len = sum(len(x["input_ids"]) for x in dataset) / len(dataset)
    n_tokens = int(round(result.steps * per_step * mean_len))
    train_seconds = max(result.seconds - tracker.eval_seconds, 0.0)
    return _summary(cfg, data, records, n_tokens, train_seconds, result)


def smoke_config(**world) -> OcrSmolConfig:
    """A seconds-long configuration on the tiny model (tests and benchmarks)."""
    w = replace(OcrPeopleConfig(pairs_per_family=2, people_per_family=4, fact_paraphrases=1,
                                implication_paraphrases=1), **world)
    return OcrSmolConfig(model=TINY, device="cpu", eval_every=1, world=w,
                         sft=SFTConfig(train="full", lr=3e-3, steps=3, batch_size=8,
                                       max_length=32, save_every=2, log_every=1,
                                       prompt_format="plain"),
                         tiny=TinyModelConfig(layers=1, heads=2, d_model=16, d_ff=32))
