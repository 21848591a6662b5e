"""Per-head features of each context sentence for the learned attribution (`learned.py`), all
from one forward pass over the prompt and the explained span (`total` and `soft` add one
backward pass).

For layer l, head h, a position t that predicts a span token y_t (the prompt's last token and
the span's tokens but the last) and a source token s, the head moves a[t, s] v_s into t's
residual stream, where a is the head's attention and v_s the value of s; through the output
projection that is the vector c[t, s] = a[t, s] W_O^h v_s (d_model,). Summed over a sentence's
tokens, three features per head:

* `attention`: a[t, s], averaged over t (AT2's feature; it has no sign: a sentence the answer
  reads but that pushes away from it scores high);
* `value`: a[t, s] |W_O^h v_s|, averaged over t (attention weighted by what the head writes);
* `direct`: c[t, s] . g_t, summed over t, where g_t is the gradient of log p(y_t) with respect
  to the final residual stream at t, in closed form: the final norm's Jacobian (RMSNorm:
  (I - x x^T / (d r^2)) diag(w) / r for input x, root-mean-square r, scale w; LayerNorm also
  centres) applied to the unembedding row of y_t minus the model's expected unembedding
  sum_v p_t(v) W_U[v]. It is the head's direct effect on the span's log-probability through
  that sentence, to first order, and it has a sign.

* `total`: the head's total effect on the span's log-probability of removing the sentence,
  to first order in the head's attention (attribution patching, Nanda 2023; Kramar et al.
  2024): removing sentence S takes the weight a[t, s] off its keys and renormalises the
  rest, which changes log p by sum_t sum_{s in S} a[t, s] (G[t] - g[t, s]) to first order,
  where g = d log p / d a is the gradient with respect to the head's attention
  probabilities and G[t] = sum_s a[t, s] g[t, s]; the feature is minus that change, summed
  over the reader rows t (below). It counts every path after the head (MLPs and later
  heads included). It is the derivative of log p in the sentence's keep weight at k = 1
  (below), and is computed as that: `soft_effects(..., keep=1)` (tested against central
  differences of a separately written attention that scales one head's attention to a
  sentence down).

* `soft`: the gradient of the span's log-probability with respect to each sentence's keep
  weight k_S in head (l, h), at k = 1/2 for every sentence and head. A keep weight scales
  the attention that each reader row gives the sentence's keys (the bias log k_S is added to
  their scores before the softmax, in every layer: `probes.intercept`'s key bias); k_S = 1
  is the full context, k_S = 0 takes the sentence out of the readers' view (its position
  stays). The readers are the rows after the context's last sentence (`reader_start`: the
  question, the answer's lead-in, the span): the context's own tokens read each other
  unweighted, so they run once without gradients as a KV cache and the backward pass covers
  the readers only (on SmolLM2-135M it gave the same LDS as weighting every row, at 0.6x the
  CPU time on 40-sentence contexts: docs/commands/explain.md). Why 1/2: the ablation
  surrogate that explain fits, linear in the kept sentences over masks that keep each
  sentence with probability 1/2, recovers each sentence's average marginal effect over those
  masks (its Banzhaf value), which is the derivative of the masks' expected log-probability
  (the multilinear extension) with respect to that sentence's keep probability, anywhere,
  and in particular at 1/2. Scaling every sentence's attention by 1/2 is the one-pass
  stand-in for that half-kept context; at k = 1 the gradient is the `total` feature (first
  order at the full context), where sentences that repeat each other hide each other's
  effect. One forward pass over the context, one forward and one backward pass over the
  readers through the eager attention, which keeps the readers' attention probabilities
  (layers x heads x readers x seq) for the backward pass, or past
  `probes.intercept.RECOMPUTE_ABOVE` bytes of them recomputes each layer's in turn.
  With masks (`--set gradient_masks=K`, `--attribution gradient` only), the gradient is
  averaged over K points instead: K/2 random half masks and their complements, a kept
  sentence at keep weight 1 and a dropped one at `MASK_FLOOR`; each is a local slope at a
  half-ablated context like those the surrogate scores, where 1/2 everywhere stands in for
  all of them uniformly. The context's pass is shared; the readers' passes are batched.

A context of n sentences gives, per kind, (n, layers * heads), layer-major.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from knowflow.errors import KnowflowError
from knowflow.lens.arch import arch_of, out_weight
from knowflow.lens.attention import AttentionPlan, intercepted
from knowflow.lens.batching import model_device
from knowflow.lens.hooks import captured
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.shared import SharedPrompt

KINDS = ("attention", "value", "direct", "total", "soft")
SOFT_KEEP = 0.5      # the keep weight at which `soft` differentiates (see above)
MASK_FLOOR = 0.2     # ... at sampled masks: a dropped sentence's keep weight (`soft_effects`)
MASK_BATCH = 4       # mask points a backward pass holds at most (each repeats the context's
MASK_BATCH_TOKENS = 1024   # cache), and fewer past this many context tokens (`points_per_pass`)


def _final_gradient(model, arch, resid: torch.Tensor, logits: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
    """(T, d_model): d log p(y_t) / d x_t at the final norm's input x (T, d_model), given the
    logits at those positions (T, vocab) and the targets (T,)."""
    unembed = arch.unembed.weight.float()                                  # (vocab, d_model)
    p = torch.softmax(logits.float(), -1)                                  # (T, vocab)
    w = unembed[targets] - p @ unembed                                     # (T, d_model)
    norm = arch.final_norm
    if norm is None:
        return w
    x = resid.float()                                                      # (T, d_model)
    scale = getattr(norm, "weight", None)
    w = w * scale.float() if scale is not None else w
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    d = x.shape[-1]
    if isinstance(norm, torch.nn.LayerNorm):
        x = x - x.mean(-1, keepdim=True)
        w = w - w.mean(-1, keepdim=True)
    elif "RMSNorm" not in type(norm).__name__:
        raise KnowflowError(f"signed attribution features do not know {type(norm).__name__}")
    r = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()                     # (T, 1)
    return w / r - (w * x).sum(-1, keepdim=True) * x / (d * r ** 3)


def reader_start(prompt_ids: Sequence[int], spans: Sequence[Sequence[int]]) -> int:
    """The first reader row of `soft`: the position after the context's last sentence token,
    at most the prompt's last position (it predicts the span's first token)."""
    end = max((max(s) + 1 for s in spans if len(s)), default=0)
    return max(1, min(end, len(prompt_ids) - 1))


def soft_effects(model, prompt_ids: Sequence[int], answer_ids: Sequence[int],
                 spans: Sequence[Sequence[int]], keep: float = SOFT_KEEP,
                 masks: torch.Tensor | None = None, shared: SharedPrompt | None = None
                 ) -> torch.Tensor:
    """(sentences, layers * heads): the `soft` feature (see the module docstring), the
    gradient at keep weight `keep` for every sentence; with `masks` (k, sentences) {0, 1},
    the mean of the gradients at k points instead, where a mask's kept sentences have keep
    weight 1 and its dropped ones `MASK_FLOOR` (`mask_points`). A token in two sentences'
    spans counts for the last. The rows before the readers (`reader_start`) run once without
    gradients, as a KV cache that the k points continue from (`points_per_pass` at a time);
    taken from `shared`'s keys and values (the prompt, run once: `lens.shared`) where they
    hold those rows."""
    arch = arch_of(model)
    n_layers, heads, n = arch.n_layers, arch.n_heads, len(spans)
    device = model_device(model)
    ids = torch.tensor([list(prompt_ids) + list(answer_ids)[:-1]], device=device)  # (1, seq)
    n_t, cut = len(answer_ids), reader_start(prompt_ids, spans)
    owner = sentence_owner(ids.shape[1], spans)                # (seq,) sentence, n for none
    if shared is not None and shared.covers(ids[0].tolist()) >= cut:
        before = shared.prefix(cut)                            # the context, already run
    else:
        before = Prefix.run(model, ids[:, :cut])               # the context, no gradients
    points = torch.full((1, n), float(keep)) if masks is None else mask_points(masks)
    target = torch.tensor(list(answer_ids), device=device)
    grad = torch.zeros(n_layers, heads, n, dtype=torch.float64, device=device)
    for batch in points.split(points_per_pass(cut)):           # (b, n) keep weights
        b = batch.shape[0]
        past = before.cache if len(points) == 1 else before.expand(b)   # one use: no copy
        with torch.enable_grad():
            weight = batch.T[None, None].repeat(n_layers, heads, 1, 1).to(device)
            weight.requires_grad_(True)                            # (layers, heads, n, b)
            bias = torch.cat([weight.log(), torch.zeros(n_layers, heads, 1, b, device=device)],
                             2)[:, :, owner.to(device)]            # (layers, heads, seq, b)
            bias = bias.permute(0, 3, 1, 2)                        # (layers, b, heads, seq)
            with intercepted(model) as layer_of:
                plan = AttentionPlan(key_bias={layer: bias[layer] for layer in range(n_layers)},
                                     layer_of=layer_of)
                logits, _ = forward(model, past=past, keep=n_t,
                                    input_ids=ids[:, cut:].expand(b, -1), knowflow_plan=plan)
            logp = torch.log_softmax(logits.float(), -1)                     # (b, T, vocab)
            total = logp[:, torch.arange(n_t), target].sum()       # the points' sum
            got, = torch.autograd.grad(total, weight)              # (layers, heads, n, b)
        grad += got.double().sum(-1)
    grad /= len(points)
    # (layers, heads, n) -> (n, layers * heads), layer-major
    return grad.permute(2, 0, 1).reshape(n, n_layers * heads).cpu()


def sentence_owner(n_seq: int, spans: Sequence[Sequence[int]]) -> torch.Tensor:
    """(seq,) the sentence each position belongs to, len(spans) for none (a token in two
    sentences' spans counts for the last)."""
    owner = torch.full((n_seq,), len(spans), dtype=torch.long)
    for j, span in enumerate(spans):
        owner[torch.tensor(list(span), dtype=torch.long)] = j
    return owner


def points_per_pass(context_tokens: int) -> int:
    """Mask points batched into one readers' pass: up to `MASK_BATCH` over a short context,
    where a batch costs little more CPU than one point, down to 1 past `MASK_BATCH_TOKENS`,
    where each point's copy of the cache costs memory and batching saves no CPU (SmolLM2-135M,
    4 points at 156 tokens: 1.7-1.8 CPU s in batches of 2 or 4, 2.4 s one at a time; at 2,005
    tokens: 11.2 s and 964 MB one at a time, 20.5 s and 3,214 MB four at a time)."""
    return max(1, min(MASK_BATCH, MASK_BATCH_TOKENS // max(context_tokens, 1)))


def mask_points(masks: torch.Tensor) -> torch.Tensor:
    """(k, sentences) keep weights of `soft` at masks (k, sentences) {0, 1}: 1 where kept,
    `MASK_FLOOR` where dropped."""
    return MASK_FLOOR + (1.0 - MASK_FLOOR) * masks.float()


def antithetic_masks(k: int, sentences: int, generator: torch.Generator) -> torch.Tensor:
    """(k, sentences) {0, 1}, k even: k / 2 random half masks and their complements, so
    every sentence is dropped in exactly half of them."""
    half = (torch.rand(k // 2, sentences, generator=generator) < 0.5).to(torch.int64)
    return torch.cat([half, 1 - half])


@torch.no_grad()
def source_features(model, prompt_ids: Sequence[int], answer_ids: Sequence[int],
                    spans: Sequence[Sequence[int]], kinds: Sequence[str] = KINDS,
                    masks: torch.Tensor | None = None, shared: SharedPrompt | None = None
                    ) -> dict[str, torch.Tensor]:
    """{kind: (sentences, layers * heads)} for each kind asked (see the module docstring);
    `masks` (k, sentences): `soft` is averaged over those mask points (`soft_effects`, its
    context pass from `shared` where given)."""
    backward = {"total": 1.0, "soft": SOFT_KEEP}     # kinds with a backward pass: their keep
    if any(k in backward for k in kinds):
        rest = [k for k in kinds if k not in backward]
        got = source_features(model, prompt_ids, answer_ids, spans, rest) if rest else {}
        return {**got, **{k: soft_effects(model, prompt_ids, answer_ids, spans, backward[k],
                                          masks if k == "soft" else None, shared)
                          for k in kinds if k in backward}}
    arch = arch_of(model)
    n_layers, heads = arch.n_layers, arch.n_heads
    ids = torch.tensor([list(prompt_ids) + list(answer_ids)[:-1]],
                       device=model_device(model))                             # (1, seq)
    n_t = len(answer_ids)
    rows = torch.arange(len(prompt_ids) - 1, ids.shape[1])[None, :]            # (1, T)
    signed = any(k != "attention" for k in kinds)
    names = [f"blocks.{layer}.attn.v" for layer in range(n_layers)] if signed else []
    names += [f"blocks.{n_layers - 1}.resid_post"] if "direct" in kinds else []
    with intercepted(model) as layer_of, captured(model, names) as store:
        plan = AttentionPlan(capture=frozenset(range(n_layers)), capture_rows=rows,
                             layer_of=layer_of)
        out = model(input_ids=ids, knowflow_plan=plan, logits_to_keep=n_t)
    grad = None
    if "direct" in kinds:
        resid = store[f"blocks.{n_layers - 1}.resid_post"][0, -n_t:]       # (T, d_model)
        grad = _final_gradient(model, arch, resid, out.logits[0],
                               torch.tensor(list(answer_ids), device=resid.device))
    groups = [torch.tensor(list(s), dtype=torch.long) for s in spans]
    per: dict[str, list[torch.Tensor]] = {k: [] for k in kinds}
    for layer in range(n_layers):
        att = plan.captured[layer][0].float()                              # (T, heads, seq)
        if signed:
            v = store[f"blocks.{layer}.attn.v"][0].float()                 # (seq, kv, dh)
            v = v.repeat_interleave(heads // v.shape[1], dim=1)            # (seq, heads, dh)
            w_o = out_weight(arch.o[layer]).float()                        # (d, heads * dh)
            w_o = w_o.reshape(w_o.shape[0], heads, -1)                     # (d, heads, dh)
        for kind in kinds:
            if kind == "attention":
                tok = att.mean(0)                                          # (heads, seq)
            elif kind == "value":
                gram = torch.einsum("dhe,dhf->hef", w_o, w_o)              # (heads, dh, dh)
                written = torch.einsum("she,hef,shf->hs", v, gram, v)      # (heads, seq)
                written = written.clamp_min(0).sqrt()
                tok = att.mean(0) * written
            else:
                back = torch.einsum("dhe,td->the", w_o, grad)              # (T, heads, dh)
                tok = (att * torch.einsum("the,she->ths", back, v)).sum(0)  # (heads, seq)
            tok = tok.cpu()
            per[kind].append(torch.stack([tok[:, g].sum(-1) for g in groups]))  # (n, heads)
    # per layer (sentences, heads) -> (sentences, layers * heads), layer-major
    return {k: torch.cat(per[k], 1).double() for k in kinds}
