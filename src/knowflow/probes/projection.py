"""Vocabulary projection of hidden states and sublayer outputs (the "logit lens").

A vector in the residual stream is read as next-token logits by passing it through the final
norm (optional) and the unembedding. Geva et al. (2023) use it twice:

* attribute extraction rate: per layer, the share of examples whose attention (or MLP) output
  at the last position projects, as its top token, onto the model's final prediction;
  attention dominates in the upper layers, where the attribute is read from the subject;
* attributes rate: the share of the top-k tokens of the residual stream at the last subject
  token that belong to the subject's known attributes; it rises through the early-middle
  layers, as MLPs enrich the subject representation.

A projected token belongs to the attributes when its text (stripped, lower case) equals a word
of an attribute, or is a prefix of at least three letters of one. Words of the subject itself
and common function words are excluded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.config import option
from knowflow.errors import ConfigError
from knowflow.lens.arch import arch_of
from knowflow.lens.batching import model_device, pad_id, right_pad
from knowflow.lens.hooks import captured, hook_name
from knowflow.probes.common import recall_examples
from knowflow.probes.examples import ProbeExample
from knowflow.store.run_folder import Progress

_STOP = frozenset(["a", "an", "the", "of", "in", "on", "at", "to", "for", "by", "and", "or",
                   "is", "was", "are", "be", "it", "its", "as", "with", "from", "that", "this"])


@dataclass(frozen=True)
class ProjectionConfig:
    final_norm: bool = option(True, "Project without the final norm before unembedding.")
    top_k: int = option(50, "Tokens for the attributes rate.")  # per projection
    batch_size: int = option(16, ge=1)
    known_only: bool = option(True, "Also probe facts the model gets wrong.", flag="all")


# record key -> the hook point it projects (the residual stream is "hidden" in the records)
POINT_OF = {"attn": "attn.out", "mlp": "mlp.out", "hidden": "resid_post"}


def attribute_words(example: ProbeExample) -> frozenset[str]:
    subject = set(re.findall(r"\w+", (example.subject or "").lower()))
    words = {w for a in example.attributes for w in re.findall(r"\w+", a.lower())}
    return frozenset(w for w in words if w not in _STOP and w not in subject)


def is_attribute_token(text: str, words: frozenset[str]) -> bool:
    t = text.strip().lower()
    if not t or not re.fullmatch(r"\w+", t) or t in _STOP:
        return False
    return t in words or (len(t) >= 3 and any(w.startswith(t) for w in words))


def project(model, vectors: torch.Tensor, final_norm: bool = True) -> torch.Tensor:
    """Vocabulary logits of residual-stream vectors: (..., d_model) -> (..., vocab)."""
    arch = arch_of(model)
    if final_norm and arch.final_norm is not None:
        vectors = arch.final_norm(vectors)
    return arch.unembed(vectors).float()


@torch.no_grad()
def projection(model, tokenizer, examples: Sequence[ProbeExample],
               cfg: ProjectionConfig = ProjectionConfig(), progress: Progress | None = None
               ) -> list[dict]:
    """One record per (example, layer): the top tokens of the attention output, the MLP
    output and the residual stream at the last position, whether each is the final
    prediction, and the attributes rate at the last subject token (and, for comparison, at
    the last position)."""
    if cfg.top_k < 1:
        raise ConfigError("must be at least 1", "top_k")
    arch = arch_of(model)
    vocab = model.get_output_embeddings().weight.shape[0]
    if cfg.top_k > vocab:  # before any forward pass: topk cannot pick more than there are
        raise ConfigError(f"must be at most the model's vocabulary size ({vocab}), got "
                          f"{cfg.top_k}", "top_k")
    located, preds, chosen = recall_examples(model, tokenizer, examples, cfg.known_only,
                                             "project", cfg.batch_size)
    dev = model_device(model)
    names: dict[int, str] = {}

    def text(tid: int) -> str:
        if tid not in names:
            names[tid] = tokenizer.decode([tid])
        return names[tid]

    records: list[dict] = []
    for start in range(0, len(chosen), cfg.batch_size):
        idx = chosen[start: start + cfg.batch_size]
        ids, mask = right_pad([located[i].input_ids for i in idx], pad_id(tokenizer), dev)
        last = mask.sum(-1) - 1  # (batch,) each prompt's last position
        subj = torch.tensor([located[i].subject[-1] for i in idx], device=dev)
        rows = torch.arange(len(idx), device=dev)
        points = [hook_name(layer, point) for layer in range(arch.n_layers)
                  for point in POINT_OF.values()]
        with captured(model, points) as acts:  # (batch, seq, d_model) each
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
        for layer in range(arch.n_layers):
            top: dict[str, list[int]] = {}
            for kind, point in POINT_OF.items():
                vec = acts[hook_name(layer, point)][rows, last]  # (batch, d_model)
                top[kind] = project(model, vec, cfg.final_norm).argmax(-1).tolist()
            hidden = acts[hook_name(layer, "resid_post")]
            topk_subj = project(model, hidden[rows, subj], cfg.final_norm).topk(
                cfg.top_k, dim=-1).indices.tolist()  # (batch, k)
            topk_last = project(model, hidden[rows, last], cfg.final_norm).topk(
                cfg.top_k, dim=-1).indices.tolist()
            for j, i in enumerate(idx):
                ex, pred = examples[i], preds[i]
                words = attribute_words(ex)

                def rate(tokens: list[int], words=words) -> float | None:
                    if not words:
                        return None
                    return sum(is_attribute_token(text(t), words) for t in tokens) / len(tokens)

                records.append({
                    "example": ex.id or str(i), "prompt": ex.prompt, "subject": ex.subject,
                    "prediction": pred.text, "known": pred.known, "layer": layer,
                    "top_attn": text(top["attn"][j]), "top_mlp": text(top["mlp"][j]),
                    "top_hidden": text(top["hidden"][j]),
                    "attn_extracts": top["attn"][j] == pred.token_id,
                    "mlp_extracts": top["mlp"][j] == pred.token_id,
                    "hidden_matches": top["hidden"][j] == pred.token_id,
                    "attr_rate_subject": rate(topk_subj[j]),
                    "attr_rate_last": rate(topk_last[j]),
                    "top_subject": [text(t) for t in topk_subj[j][:10]]})
        if progress:
            progress(min(start + cfg.batch_size, len(chosen)), len(chosen))
    return records


def summarize_projection(records: Sequence[dict]) -> dict:
    """Per-layer extraction rates (attention, MLP, residual stream) and attributes rates."""
    n_layers = max((r["layer"] for r in records), default=-1) + 1

    def mean(key: str) -> list[float | None]:
        out = []
        for layer in range(n_layers):
            vals = [r[key] for r in records if r["layer"] == layer and r[key] is not None]
            out.append(sum(vals) / len(vals) if vals else None)
        return out

    summary = {"extraction_rate": {"attn": mean("attn_extracts"), "mlp": mean("mlp_extracts"),
                                   "hidden": mean("hidden_matches")},
               "attributes_rate": {"last_subject": mean("attr_rate_subject"),
                                   "last": mean("attr_rate_last")},
               "n_examples": len({r["example"] for r in records})}
    for kind, curve in summary["extraction_rate"].items():
        valid = [(v, layer) for layer, v in enumerate(curve) if v is not None]
        best = max(valid, key=lambda t: (t[0], -t[1])) if valid else None  # earliest peak
        summary[f"peak_{kind}_extraction"] = ({"layer": best[1], "rate": best[0]}
                                              if best else None)
    return summary
