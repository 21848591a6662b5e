"""Sentence attribution of one answer: by ablation (a sparse linear surrogate over random
sentence subsets, ContextCite's method) and by one forward pass (attention).

Ablation. Random masks keep each sentence with probability `keep_prob`; the answer's
teacher-forced log-probability after each ablated prompt is scored over the token trie of the
ablated prompts (`lens.scorer`'s "trie" strategy): every distinct prefix (the chat template,
then each run of kept sentences two prompts share up to the first sentence in which they
differ) is computed once, an identical prompt (a mask drawn twice) costs nothing, and only
the answer's positions are projected to the vocabulary; the scores equal one-at-a-time
forwards up to float rounding. A lasso surrogate (`surrogate.py`) fitted on the masks gives
each sentence's attribution; held-out masks give its LDS; removing the k top sentences gives
the top-k drop (the fall of the answer's log-probability).

One pass. Gradient x input: the answer's log-probability differentiated with respect to the
input embeddings, |gradient . embedding| summed over each sentence's tokens (one forward and
one backward pass); with `--levels ...,one_pass`, reported next to the ablation result with
its rank agreement. (The mean
attention from the answer position to each sentence was tried first and found the needle
sentence in 1 of 16 needle items on SmolLM2-135M-Instruct, gradient x input in 10.)
`attention_to_sentences` gives the per-head attention to a sentence from which the mechanism
picks the heads it knocks out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.data.facts import ConflictItem
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import ablated_prompts
from knowflow.explanation.splitter import Sentence
from knowflow.explanation.surrogate import balanced_masks, fit_surrogate, random_masks, spearman
from knowflow.lens.arch import arch_of
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.batching import cache_keyword, model_device
from knowflow.lens.shared import SharedPrompt, score_shared
from knowflow.probes.mass import span_mass
from knowflow.store.run_folder import Progress

HELD_OUT_KEEP = 0.5     # held-out masks keep each sentence with this probability


@dataclass(frozen=True)
class Attribution:
    weights: list[float]             # per sentence, in context order
    intercept: float | None          # the surrogate's log-probability with no sentence
    alpha: float | None              # the lasso penalty CV chose (None: learned)
    top: int                         # the sentence with the largest weight
    lds: float | None                # Spearman on held-out ablations (None: none held out)
    topk_drop: dict[int, float]      # k -> log p(full) - log p(without the k top sentences)
    n_prompts: int                   # ablated prompts scored
    method: str = "ablation"         # ablation | learned | hierarchical | leave-one-out
    lds_on: str | None = None        # "holdout" (extra masks) | "folds" (out-of-fold)
    rounds: tuple[dict, ...] = ()    # per round: {"ablations": count, "lds": out-of-fold}
    stopped: str | None = None       # "converged" | "limit" (the ablation rounds' end)

    def to_dict(self) -> dict:
        out = {"attribution_method": self.method,
               "attribution_intercept": self.intercept, "lasso_alpha": self.alpha,
               "top_sentence": self.top, "lds": self.lds, "lds_on": self.lds_on,
               "topk_drop": {str(k): v for k, v in self.topk_drop.items()},
               "n_ablated_prompts": self.n_prompts}
        if self.rounds:
            out.update(ablation_rounds=list(self.rounds), ablations_used=
                       self.rounds[-1]["ablations"], ablations_stopped=self.stopped,
                       surrogate_fit=self.rounds[-1].get("fit"))
        return out


def score_masks(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
                masks: torch.Tensor, continuation: str | Sequence[str], cfg: ExplainConfig,
                lead: str = "", progress: Progress | None = None,
                shared: SharedPrompt | None = None) -> torch.Tensor:
    """The continuation's log-probability after the prompt (and `lead`) under each mask:
    (ablations,); for a list of continuations, (ablations, continuations). The masks are
    scored over their token trie (`lens.shared.score_shared`), from `shared`'s keys and
    values (the item's full prompt: each mask then costs its tokens after its first removed
    sentence) where given, in passes of at most `cfg.score_tokens` new tokens, so memory
    grows with the pass, not the count; `progress` hears when they are done (stage
    "ablations")."""
    conts = [continuation] if isinstance(continuation, str) else list(continuation)
    seqs = ablated_prompts(item, sentences, masks, tokenizer, cfg.prompt_format, lead)
    scores = score_shared(model, tokenizer, seqs, [conts] * len(seqs), shared,
                          cfg.score_tokens)
    if progress is not None:
        progress(len(masks), len(masks), "ablations")
    out = torch.tensor([[c[0] for c in s] for s in scores],
                       dtype=torch.float64).reshape(len(masks), len(conts))
    return out[:, 0] if isinstance(continuation, str) else out   # (ablations[, conts])


def prompt_chunks(lengths: Sequence[int], rows: int, tokens: int) -> list[range]:
    """Consecutive index ranges of at most `rows` prompts and `tokens` tokens (one prompt
    at least)."""
    out, start, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and (i - start >= rows or total + n > tokens):
            out.append(range(start, i))
            start, total = i, 0
        total += n
    if lengths:
        out.append(range(start, len(lengths)))
    return out


def item_generator(cfg: ExplainConfig, key: str) -> torch.Generator:
    """A generator seeded by the config's seed and `key` (an item's id and context)."""
    seed = int(hashlib.sha256(f"{cfg.seed}:{key}".encode()).hexdigest()[:15], 16)
    return torch.Generator().manual_seed(seed)


def ablation_masks(n_sentences: int, cfg: ExplainConfig, key: str) -> tuple[torch.Tensor,
                                                                           torch.Tensor]:
    """(fit masks (ablations, sentences), each sentence kept with probability `keep_prob`;
    held-out masks (holdout, sentences), each kept with probability `HELD_OUT_KEEP`: the LDS
    is ContextCite's, on half masks, whatever the fit masks keep), drawn from a generator
    seeded by the config's seed and the item's key."""
    gen = item_generator(cfg, key)
    fit = balanced_masks(cfg.ablations, n_sentences, cfg.keep_prob, gen) \
        if cfg.design == "balanced" else \
        random_masks(cfg.ablations, n_sentences, cfg.keep_prob, gen)
    return fit, random_masks(cfg.holdout, n_sentences, HELD_OUT_KEEP, gen)


def ablation_counts(cfg: ExplainConfig) -> list[int]:
    """The ablation counts after which the surrogate is fitted and checked: `min_ablations`,
    then `ablation_step` more each round, up to `ablations` (one round of `ablations` where
    `converge` is 0 or the minimum is not below it)."""
    first = min(cfg.min_ablations, cfg.ablations) if cfg.converge > 0 else cfg.ablations
    return sorted({*range(first, cfg.ablations, cfg.ablation_step), cfg.ablations})


def converged(rounds: Sequence[dict], tol: float, floor: float = -1.0) -> bool:
    """The stopping rule: the out-of-fold LDS rose by less than `tol` over the last round
    (a surrogate that has stopped improving on masks it did not see) and is at least
    `floor` (a fit that is flat at a poor level goes on: on long contexts the LDS keeps
    rising with ablations long after a round's rise first falls below `tol`,
    docs/findings/explain.md, 2026-12-08). An LDS that cannot be measured, a constant
    prediction, counts as not converged."""
    if len(rounds) < 2 or tol <= 0:
        return False
    now, before = rounds[-1]["lds"], rounds[-2]["lds"]
    return now is not None and before is not None and now - before < tol and now >= floor


def attribute(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
              continuation: str, logprob_full: float, cfg: ExplainConfig, lead: str = "",
              progress: Progress | None = None, shared: SharedPrompt | None = None,
              prior: torch.Tensor | None = None) -> Attribution:
    """Ablation attribution of the continuation to each sentence (see the module docstring):
    rounds of ablations (`ablation_counts`) until the surrogate's out-of-fold LDS has
    converged (`converged`) or `ablations` are spent; then the held-out masks and the top-k
    drops, scored together. `prior` (sentences,): one-pass scores the lasso is steered by
    (`surrogate.fit_surrogate`)."""
    n = len(sentences)
    fit_masks, held = ablation_masks(n, cfg, item.id + item.context)
    targets = torch.zeros(0, dtype=torch.float64)
    rounds: list[dict] = []
    stopped = "limit"
    for count in ablation_counts(cfg):
        new = fit_masks[len(targets):count]
        targets = torch.cat([targets, score_masks(model, tokenizer, item, sentences, new,
                                                  continuation, cfg, lead, shared=shared)])
        surrogate = fit_surrogate(fit_masks[:count], targets, cfg.cv_folds, cfg.seed, prior)
        rounds.append({"ablations": count, "lds": spearman(surrogate.out_of_fold, targets),
                       "fit": surrogate.fit})
        if progress is not None:
            progress(count, cfg.ablations, "ablations")
        if converged(rounds, cfg.converge, cfg.lds_floor):
            stopped = "converged"
            break
    weights = surrogate.weights
    order, drops, actual = topk_drops(model, tokenizer, item, sentences, weights, continuation,
                                      logprob_full, cfg, lead, shared, held)
    lds, lds_on = (spearman(surrogate.predict(held), actual), "holdout") if len(held) > 1 \
        else (rounds[-1]["lds"], "folds")
    return Attribution([float(w) for w in weights], surrogate.intercept, surrogate.alpha,
                       order[0], lds, drops, len(targets) + len(held) + len(drops),
                       lds_on=lds_on, rounds=tuple(rounds), stopped=stopped)


def only_sentence(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
                  continuation: str, logprob_full: float, cfg: ExplainConfig,
                  lead: str = "", shared: SharedPrompt | None = None) -> Attribution:
    """The attribution of a one-sentence context (NQ-Swap's passages often are one): its
    weight is the fall of the span's log-probability when it is removed, one scored prompt
    and exact (a surrogate over one sentence has nothing else to fit, and no other subset to
    hold out: no LDS, no top-k drop past the one)."""
    removed = score_masks(model, tokenizer, item, sentences,
                          torch.zeros(1, len(sentences), dtype=torch.int64), continuation, cfg,
                          lead, shared=shared)
    empty = float(removed[0])
    return Attribution([logprob_full - empty], empty, None, 0, None, {}, 1, "leave-one-out")


def topk_drops(model, tokenizer, item: ConflictItem, sentences: Sequence[Sentence],
               weights: torch.Tensor, continuation: str, logprob_full: float,
               cfg: ExplainConfig, lead: str = "", shared: SharedPrompt | None = None,
               also: torch.Tensor | None = None
               ) -> tuple[list[int], dict[int, float], torch.Tensor]:
    """(sentences by falling weight, {k: the fall of the answer's log-probability when the k
    top sentences are removed}, the log-probabilities under `also` (more masks, (m,
    sentences), scored in the same call)). From `shared`, each removal costs the tokens
    after the first removed sentence."""
    n = len(sentences)
    order = sorted(range(n), key=lambda j: -float(weights[j]))
    ks = sorted({k for k in cfg.top_k if k < n})
    extra = also if also is not None else torch.zeros(0, n, dtype=torch.int64)
    removed = torch.ones(len(ks), n, dtype=torch.int64)                 # (ks, sentences)
    for r, k in enumerate(ks):
        removed[r, order[:k]] = 0
    both = torch.cat([removed, extra.long()])
    fallen = score_masks(model, tokenizer, item, sentences, both, continuation, cfg, lead,
                         shared=shared) if len(both) else torch.zeros(0, dtype=torch.float64)
    drops = {k: logprob_full - float(v) for k, v in zip(ks, fallen[:len(ks)], strict=True)}
    return order, drops, fallen[len(ks):]


@torch.no_grad()
def attention_to_sentences(model, prompt_ids: list[int], spans: Sequence[Sequence[int]],
                           shared: SharedPrompt | None = None) -> torch.Tensor:
    """(layers, heads, sentences): the attention probability from the answer position (the
    prompt's last token) to each sentence's tokens, from one forward pass (of the tokens
    after those `shared` holds, where given)."""
    arch = arch_of(model)
    held = min(shared.covers(prompt_ids), len(prompt_ids) - 1) if shared is not None else 0
    past = shared.prefix(held) if held else None
    dev = model_device(model)
    ids = torch.tensor([prompt_ids[held:]], device=dev)                    # (1, rest)
    with intercepted(model) as layer_of:
        plan = AttentionPlan(capture=frozenset(range(arch.n_layers)),
                             capture_rows=torch.tensor([ids.shape[1] - 1]),
                             layer_of=layer_of)
        extra = {} if past is None else {
            cache_keyword(model): past.cache,
            "position_ids": torch.arange(held, len(prompt_ids), device=dev)[None]}
        model(input_ids=ids, knowflow_plan=plan, logits_to_keep=1, **extra)
    weights = torch.stack([plan.captured[layer][0] for layer in range(arch.n_layers)]
                          ).cpu()                                          # (layers, heads, seq)
    return torch.stack([span_mass(weights, torch.tensor(list(s), dtype=torch.long))
                        for s in spans], dim=-1)                           # (layers, heads, sent)


def gradient_x_input(model, prompt_ids: list[int], answer_ids: list[int],
                     spans: Sequence[Sequence[int]]) -> list[float]:
    """Per sentence, |gradient x input| of the answer's log-probability with respect to the
    input embeddings, summed over the embedding and the sentence's tokens: one forward and
    one backward pass (only the embeddings' gradient is computed)."""
    dev = model_device(model)
    ids = torch.tensor([prompt_ids + answer_ids], device=dev)            # (1, seq)
    with torch.enable_grad():
        emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)  # (1, seq, d)
        start = len(prompt_ids) - 1
        logits = model(inputs_embeds=emb).logits[0, start:start + len(answer_ids)].float()
        logp = torch.log_softmax(logits, -1)                              # (answer, vocab)
        target = torch.tensor(answer_ids, device=dev)[:, None]
        total = logp.gather(-1, target).sum()
        (grad,) = torch.autograd.grad(total, emb)
    per_token = (grad[0] * emb[0].detach()).sum(-1).abs().cpu()          # (seq,)
    return [float(per_token[list(s)].sum()) for s in spans]


def agreement(weights: Sequence[float], scores: Sequence[float]) -> dict:
    """How the one-pass estimate agrees with the ablation weights: same top sentence, and the
    Spearman correlation of the two orders."""
    w, s = torch.tensor(list(weights)), torch.tensor(list(scores))
    return {"one_pass_top": int(s.argmax()), "same_top": int(s.argmax()) == int(w.argmax()),
            "spearman": spearman(w, s)}
