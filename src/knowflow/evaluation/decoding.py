"""Decoding methods, one registry: greedy, context-aware decoding (CAD), AdaCAD, COIECD, CoCoA,
opinion prompts, head steering.

CAD (Shi et al. 2023) contrasts the next-token logits with the context and without it:
`(1 + alpha) z(y | c, x) - alpha z(y | x)`; alpha 0 is greedy. AdaCAD (Wang et al. 2025) sets
alpha per token to the Jensen-Shannon divergence between the two next-token distributions
(in bits, so 0 <= alpha_t <= 1): little correction where context and memory agree, more where
they conflict. COIECD (Yuan et al. 2024; `coiecd.py`) applies the contrast only to the tokens
that fail an entropy-based conflict test; CoCoA (Khandelwal et al. 2025; `cocoa.py`) sets the
per-token weight from a Renyi-1/2 conflict, the entropy gap and the context's top-2 margin.
Opinion prompting (Zhou et al. 2023) is a prompt
transform (`prompts.opinion_item`) and combines with any method (`opinion` alone is opinion +
greedy; `opinion+cad`, ...).

Both streams run in one process as two left-padded batches of the same rows, each continuing
from its own KV cache (and its own shared-prefix cache); the no-context prompt is the same
renderer's output with the context removed. Generation feeds the chosen token to both streams.
Log-likelihood scoring teacher-forces each candidate through both streams and sums the tokens'
log-probabilities under the combined logits, so a candidate's CAD score is the sum of its
tokens' CAD log-probabilities.

The adaptive plausibility constraint (Li et al. 2023, contrastive decoding) guards generation
with CAD and AdaCAD: at each step only tokens with `p(y | c, x) >= beta * max_y' p(y' | c, x)`
are eligible before the contrast picks one, so the contrast can reorder the with-context
model's plausible tokens but never promote a token that model finds implausible (the source of
garbled names like "Benggazi"). beta 0 is off (plain CAD), beta 1 leaves only the with-context
model's top token (greedy). Teacher-forced scoring ignores beta: the candidate's tokens are
given, and masking them would give -inf scores rather than a ranking.

In generation every contrastive method runs under the guard (`guard.py`): ending,
punctuation and bare spaces, the rest of a word once begun, closed-class words, tokens the
context supports, the question's own lower-case words and the names it shares with the
context are the with-context model's choice, and a word the contrast picks must start as a
passage word does, so the contrast picks content (which name) but never ends an answer
early, splices a name or swerves off the question's wording (`guard=False`, label
`[unguarded]`, is the plain method).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.errors import ConfigError
from knowflow.evaluation.cocoa import cocoa_logits
from knowflow.evaluation.coiecd import coiecd_logits
from knowflow.evaluation.generate import (
    StopTable,
    Stream,
    _eos_ids,
    clean_output,
    decode,
    generate,
    prompt_words,
    stop_table,
)
from knowflow.evaluation.guard import guarded_argmax, passage_starts
from knowflow.evaluation.steer_heads import NAME as HEADS
from knowflow.evaluation.steer_heads import HeadSteering, parse_spec, steered
from knowflow.lens.batching import pad_id, right_pad
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.prompt_batches import prefill, sorted_batches
from knowflow.lens.scorer import Score, encode_continuations, score_continuations
from knowflow.store.run_folder import Progress

BASES = {"greedy": "the model's own next-token logits (default)",
         "cad": "context-aware decoding: (1 + alpha) z(y|c,x) - alpha z(y|x) (Shi et al. 2023)",
         "adacad": "CAD with alpha_t = JSD(p(.|c,x) || p(.|x)) per token (Wang et al. 2025)",
         "coiecd": "the contrast only where the contextual information-entropy test finds a "
                   "conflict (Yuan et al. 2024; coiecd.py)",
         "cocoa": "CAD with alpha_t from the Renyi-1/2 conflict, the entropy gap and the "
                  "context's top-2 margin (Khandelwal et al. 2025; cocoa.py)",
         HEADS: "scale the top-k context heads by gamma or prune the top-k memory heads, k and "
                "gamma chosen on a calibration split (steer_heads.py)"}
OPINION = "opinion"
METHODS = {**BASES, OPINION: "opinion-based prompt with an instruction to answer from the "
                             "text (Zhou et al. 2023); combine as opinion+cad"}


@dataclass(frozen=True)
class Method:
    """One decoding method: a base (greedy, cad, adacad, coiecd, cocoa, heads), CAD's alpha,
    the plausibility constraint's beta (cad, adacad, cocoa; generation only), the opinion
    prompt, the generation guard of the contrastive methods (guard.py)."""

    base: str = "greedy"
    alpha: float = 1.0          # cad only
    opinion: bool = False
    heads: str = ""             # heads only: its steering spec (steer_heads.py); "" to calibrate
    beta: float = 0.0           # cad, adacad, cocoa: adaptive plausibility constraint (0: off)
    guard: bool = True          # generation: stops and word pieces by the context model (guard.py)

    @property
    def contrastive(self) -> bool:
        return self.base not in ("greedy", HEADS)

    @property
    def spec(self) -> str:
        base = f"{HEADS}:{self.heads}" if self.heads else self.base
        return f"{OPINION}+{base}" if self.opinion else base

    @property
    def steering(self) -> HeadSteering | None:
        """The heads method's steering (a bare `heads` must be calibrated first)."""
        if self.base != HEADS:
            return None
        if not self.heads:
            raise ConfigError("a bare `heads` method chooses its heads on a calibration split, "
                              "which knowflow.evaluate does; elsewhere give heads:L.H+L.HxGAMMA",
                              "method")
        return HeadSteering.parse(self.heads)

    @property
    def label(self) -> str:
        name = f"cad(a={self.alpha:g})" if self.base == "cad" else self.spec.removeprefix(
            f"{OPINION}+")
        if self.beta > 0:
            name = f"{name[:-1]},b={self.beta:g})" if name.endswith(")") else \
                f"{name}(b={self.beta:g})"
        if self.contrastive and not self.guard:
            name = f"{name}[unguarded]"
        if self.opinion:
            return OPINION if self.base == "greedy" else f"{OPINION}+{name}"
        return name

    def logits(self, z_ctx: torch.Tensor, z_base: torch.Tensor) -> torch.Tensor:
        """Combined logits from the with-context and no-context logits (..., vocab)."""
        if self.base == "cad":
            return cad_logits(z_ctx, z_base, self.alpha)
        if self.base == "adacad":
            return cad_logits(z_ctx, z_base, jsd(z_ctx, z_base)[..., None])
        if self.base == "coiecd":
            return coiecd_logits(z_ctx, z_base)
        if self.base == "cocoa":
            return cocoa_logits(z_ctx, z_base)
        return z_ctx

    def next_logits(self, z_ctx: torch.Tensor, z_base: torch.Tensor) -> torch.Tensor:
        """The scores generation picks the next token from: `logits` within the plausible
        set of the with-context distribution (beta; all tokens at beta 0), -inf elsewhere."""
        return plausible(z_ctx, self.logits(z_ctx, z_base), self.beta)

    def pick(self, z_ctx: torch.Tensor, z_base: torch.Tensor, last: torch.Tensor,
             table: StopTable, copies: torch.Tensor | None = None,
             starts: torch.Tensor | None = None) -> torch.Tensor:
        """One generation step: each live row's token, (live,), from the with-context and
        no-context logits (live, vocab), each row's previous token `last` (live,) and the
        tokens that repeat its no-context prompt's words, `copies` (live, vocab): the
        method's choice under the guard (guard.py), or its plain argmax without it."""
        scores = self.next_logits(z_ctx, z_base)                        # (live, vocab)
        if not self.guard:
            return scores.argmax(-1)
        return guarded_argmax(z_ctx, z_base, scores, last, table, copies, starts)


def plausible(z_ctx: torch.Tensor, scores: torch.Tensor, beta: float) -> torch.Tensor:
    """`scores` with -inf where p(y|c,x) < beta * max p(.|c,x) (Li et al. 2023); unchanged at
    beta 0. z_ctx, scores: (..., vocab)."""
    if beta <= 0:
        return scores
    z = z_ctx.float()
    cut = z.max(-1, keepdim=True).values + math.log(beta)              # (..., 1)
    return scores.masked_fill(z < cut, float("-inf"))


def cad_logits(z_ctx: torch.Tensor, z_base: torch.Tensor, alpha) -> torch.Tensor:
    """(1 + alpha) z_ctx - alpha z_base; alpha a float or a tensor broadcasting to (..., vocab)."""
    return (1 + alpha) * z_ctx.float() - alpha * z_base.float()


def jsd(z_p: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in bits between softmax(z_p) and softmax(z_q) over the last
    axis: (..., vocab) -> (...)."""
    lp = torch.log_softmax(z_p.float(), dim=-1)                    # (..., vocab)
    lq = torch.log_softmax(z_q.float(), dim=-1)
    lm = torch.logsumexp(torch.stack([lp, lq]), dim=0) - math.log(2)  # log of the mixture
    kl_p = (lp.exp() * (lp - lm)).sum(-1)
    kl_q = (lq.exp() * (lq - lm)).sum(-1)
    return (0.5 * (kl_p + kl_q) / math.log(2)).clamp(min=0.0)


MAX_ALPHA = 1000.0
BETA_METHODS = ("cad", "adacad", "cocoa")  # the methods --beta constrains
BETA = 0.3  # the default plausibility constraint (a sweep; docs/commands/eval-decoding.md)


def _numbers(value, name: str, example: str) -> tuple[float, ...]:
    """One number or several, comma-separated; each finite and >= 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        parts = [value]
    elif isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
    else:
        parts = list(value)
    out = []
    for p in parts:
        try:
            number = float(p)
        except (TypeError, ValueError):
            raise ConfigError(f"{p!r} is not a number", name,
                              f"give one or more numbers >= 0, comma-separated ({example})"
                              ) from None
        if not math.isfinite(number) or number < 0:
            raise ConfigError(f"must be a finite number >= 0, got {p}", name)
        out.append(number)
    if not out:
        raise ConfigError("no value given", name)
    return tuple(out)


def parse_alphas(alpha) -> tuple[float, ...]:
    """--alpha: one number or several, comma-separated; each finite and >= 0."""
    out = _numbers(alpha, "alpha", "0,0.5,1,2")
    for value in out:
        if value > MAX_ALPHA:  # (1 + alpha) z overflows float32 near 1e37: NaN scores
            raise ConfigError(f"must be at most {MAX_ALPHA:g}, got {value:g}", "alpha",
                              "beyond 1000, CAD ranks tokens by z(y|c,x) - z(y|x) alone")
    return out


def parse_betas(beta) -> tuple[float, ...]:
    """--beta: one number or several in [0, 1], comma-separated (0: no constraint)."""
    out = _numbers(beta, "beta", "0,0.1")
    for value in out:
        if value > 1:
            raise ConfigError(f"must be at most 1, got {value:g}", "beta",
                              "beta 1 keeps only the top token (greedy)")
    return out


def parse_methods(method: str, alpha=1.0, beta=0.0, guard: bool = True) -> list[Method]:
    """--method NAME[,NAME...] (greedy, cad, adacad, coiecd, cocoa, opinion, opinion+BASE);
    `cad` runs once per alpha of --alpha, `cad`, `adacad` and `cocoa` once per beta of --beta;
    `guard`: the contrastive methods' generation guard (guard.py). Raises ConfigError for an
    unknown name."""
    alphas, betas = parse_alphas(alpha), parse_betas(beta)
    names = [n.strip() for n in str(method).split(",")]
    out: list[Method] = []
    for name in names:
        opinion, base = False, name
        if name == OPINION:
            opinion, base = True, "greedy"
        elif name.startswith(f"{OPINION}+"):
            opinion, base = True, name.removeprefix(f"{OPINION}+")
        steer = parse_spec(base) if base.split(":")[0] == HEADS else None
        if steer is not None:
            base, out_heads = HEADS, steer.spec
        else:
            out_heads = ""
        if base not in BASES:
            raise ConfigError(f"unknown method {name!r}", "method",
                              f"give one or more of {', '.join(METHODS)} (or opinion+cad, "
                              "opinion+adacad), comma-separated")
        for a in (alphas if base == "cad" else (1.0,)):
            for b in (betas if base in BETA_METHODS else (0.0,)):
                m = Method(base, a, opinion, out_heads, b, bool(guard))
                if m not in out:
                    out.append(m)
    return out


def methods_of(cfg) -> list[Method]:
    """The methods of an `EvalConfig` (its method, alpha and beta fields)."""
    return parse_methods(cfg.method, cfg.alpha, getattr(cfg, "beta", 0.0),
                         getattr(cfg, "guard", True))


def single_method(method: str, alpha=1.0, beta=0.0, guard: bool = True) -> Method:
    """The one method of a spec that names exactly one (an evaluation pass runs one)."""
    methods = parse_methods(method, alpha, beta, guard)
    if len(methods) != 1:
        raise ConfigError("one evaluation pass runs one method", "method")
    return methods[0]


def _decode_batch(model, tokenizer, seqs, base_seqs, prefixes, max_new_tokens, table,
                  method: Method) -> list[list[int]]:
    """`generate`'s loop and stopping rules (`generate.decode`) on the method's combined
    logits of the with-context and no-context streams."""
    streams = (Stream(model, seqs, prefixes[0], pad_id(tokenizer)),
               Stream(model, base_seqs, prefixes[1], pad_id(tokenizer)))
    copies = prompt_words(table, base_seqs, seqs)                      # (batch, vocab)
    starts = passage_starts(tokenizer, seqs, base_seqs, len(table.word))  # (batch, vocab)
    return decode(streams, lambda z_ctx, z_base, last, rows: method.pick(
        z_ctx, z_base, last, table, copies[rows.cpu()], starts[rows.cpu()]), max_new_tokens,
        table)


def _batches(model, seqs, base_seqs, batch_size: int, share_prefix: bool):
    if len(seqs) != len(base_seqs):
        raise ValueError("one no-context prompt per prompt")
    prefixes = (Prefix.build(model, seqs, share=share_prefix),
                Prefix.build(model, base_seqs, share=share_prefix))
    return prefixes, sorted_batches([len(s) for s in seqs], batch_size)


def generate_contrastive(model, tokenizer, seqs: Sequence[list[int]],
                         base_seqs: Sequence[list[int]], method: Method, batch_size: int = 16,
                         max_new_tokens: int = 24, progress: Progress | None = None,
                         stage: str = "generate", share_prefix: bool = True) -> list[str]:
    """Answers decoded with `method` from prompts `seqs` and their no-context `base_seqs`."""
    prefixes, batches = _batches(model, seqs, base_seqs, batch_size, share_prefix)
    table = stop_table(tokenizer, model.get_output_embeddings().weight.shape[0], _eos_ids(model))
    texts = [""] * len(seqs)
    for n, batch in enumerate(batches):
        outs = _decode_batch(model, tokenizer, [list(seqs[i]) for i in batch],
                             [list(base_seqs[i]) for i in batch], prefixes, max_new_tokens,
                             table, method)
        for i, toks in zip(batch, outs, strict=True):
            texts[i] = clean_output(tokenizer.decode(toks, skip_special_tokens=True))
        if progress is not None:
            progress(sum(len(b) for b in batches[:n + 1]), len(seqs), stage)
    return texts


@torch.no_grad()
def _candidate_logits(model, prompts, flat, owner, prefix: Prefix, pad_id: int):
    """Next-token logits before each candidate token, (rows, width, vocab), and the padded
    candidate ids and mask, (rows, width): one row per candidate of the batch."""
    last, cache, mask, lengths = prefill(model, prompts, prefix, pad_id)  # last: (batch, vocab)
    device = last.device
    ids, cmask = right_pad(flat, pad_id, device)                          # (rows, width)
    width = ids.shape[1]
    owner_t = torch.tensor(owner, device=device)
    logits = last[owner_t][:, None]                                     # (rows, 1, vocab)
    if width > 1:
        cache.batch_select_indices(owner_t)
        full_mask = torch.cat([mask[owner_t], cmask], dim=1)              # (rows, seq + width)
        pos = lengths[owner_t] + torch.arange(width, device=device)[None]  # (rows, width)
        rest, _ = forward(model, past=cache, input_ids=ids[:, :-1],
                          attention_mask=full_mask[:, :-1], position_ids=pos[:, :-1])
        logits = torch.cat([logits, rest], dim=1)                       # (rows, width, vocab)
    return logits, ids, cmask


def score_contrastive(model, tokenizer, prompts: Sequence[list[int]],
                      base_prompts: Sequence[list[int]], continuations: Sequence[Sequence[str]],
                      method: Method, batch_size: int = 16, progress: Progress | None = None,
                      stage: str = "loglik", share_prefix: bool = True) -> list[list[Score]]:
    """Each candidate's (summed log-probability under `method`, token count)."""
    conts = encode_continuations(tokenizer, continuations)
    prefixes, batches = _batches(model, prompts, base_prompts, batch_size, share_prefix)
    out: list[list[Score]] = [[] for _ in prompts]
    for n, batch in enumerate(batches):
        owner = [b for b, i in enumerate(batch) for _ in conts[i]]
        flat = [c for i in batch for c in conts[i]]
        z_c, ids, cmask = _candidate_logits(model, [list(prompts[i]) for i in batch], flat,
                                            owner, prefixes[0], pad_id(tokenizer))
        z_n, _, _ = _candidate_logits(model, [list(base_prompts[i]) for i in batch], flat,
                                      owner, prefixes[1], pad_id(tokenizer))
        logp = torch.log_softmax(method.logits(z_c, z_n).float(), dim=-1)  # (rows, width, vocab)
        tok = logp.gather(-1, ids[..., None]).squeeze(-1)                  # (rows, width)
        scores = tok[:, 0] + (tok[:, 1:] * cmask[:, 1:]).sum(-1)
        for r, (b, c) in enumerate(zip(owner, flat, strict=True)):
            out[batch[b]].append((float(scores[r]), len(c)))
        if progress is not None:
            progress(sum(len(b) for b in batches[:n + 1]), len(prompts), stage)
    return out


def generate_with(method: Method, model, tokenizer, seqs, base_seqs=None, **run) -> list[str]:
    """`generate` for greedy (and opinion) methods, `generate_contrastive` otherwise."""
    if not method.contrastive:
        with steered(model, method.steering):
            return generate(model, tokenizer, seqs, **run)
    return generate_contrastive(model, tokenizer, seqs, base_seqs, method, **run)


def score_with(method: Method, model, tokenizer, seqs, base_seqs, continuations, **run
               ) -> list[list[Score]]:
    """`score_continuations` for greedy (and opinion) methods, `score_contrastive` otherwise."""
    if not method.contrastive:
        with steered(model, method.steering):
            return score_continuations(model, tokenizer, seqs, continuations, **run)
    return score_contrastive(model, tokenizer, seqs, base_seqs, continuations, method, **run)
