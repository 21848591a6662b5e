"""Shared plumbing for the probes: batching, the model's own prediction, layer windows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from knowflow.errors import ConfigError, KnowflowError
from knowflow.lens.batching import model_device, pad_id, right_pad
from knowflow.lens.prefix import call_keeping
from knowflow.probes.examples import ProbeExample, require_subject
from knowflow.probes.spans import Located, locate


@dataclass(frozen=True)
class Prediction:
    token_id: int
    prob: float
    text: str
    known: bool | None  # None: the example gives no answer or attributes to check against


def _last_logits(model, ids: torch.Tensor, mask: torch.Tensor, last: torch.Tensor
                 ) -> torch.Tensor:
    """Logits at each row's position `last` (batch,) of a right-padded batch: (batch, vocab)."""
    keep = torch.unique(last)                                  # (k,) sorted distinct positions
    _, logits = call_keeping(model, keep, input_ids=ids, attention_mask=mask)  # (batch, k, vocab)
    return logits[torch.arange(len(ids), device=ids.device), torch.searchsorted(keep, last)]


def is_known(example: ProbeExample, token_text: str) -> bool | None:
    """Does the predicted token start the answer (or, without one, an attribute)?"""
    targets = [example.answer] if example.answer else list(example.attributes)
    if not targets:
        return None
    word = token_text.strip().lower()
    return bool(word) and any(t.strip().lower().startswith(word) for t in targets)


@torch.no_grad()
def predict(model, tokenizer, examples: Sequence[ProbeExample], located: Sequence[Located],
            batch_size: int = 16) -> list[Prediction]:
    """The unmodified model's top next token after each prompt, and its probability. Only
    the prompts' last positions are projected to the vocabulary (`logits_to_keep`): every
    position's logits of a 2k-token prompt are 2k x vocab floats (0.4 GiB on SmolLM2)."""
    out: list[Prediction] = []
    dev = model_device(model)
    for start in range(0, len(located), batch_size):
        chunk = located[start: start + batch_size]
        ids, mask = right_pad([loc.input_ids for loc in chunk], pad_id(tokenizer), dev)
        last = mask.sum(-1) - 1  # (batch,) each prompt's last position
        rows = torch.arange(len(chunk), device=dev)
        probs = _last_logits(model, ids, mask, last)[rows].float().softmax(-1)  # (batch, vocab)
        top = probs.argmax(-1)
        for j, tid in enumerate(top.tolist()):
            text = tokenizer.decode([tid])
            out.append(Prediction(tid, float(probs[j, tid]), text,
                                  is_known(examples[start + j], text)))
    return out


def window(centre: int, size: int, n_layers: int) -> tuple[int, int]:
    """Inclusive [lo, hi] of `size` consecutive layers centred on `centre`, clipped to the
    model (the paper's window of k layers around layer l)."""
    lo = centre - (size - 1) // 2
    hi = lo + size - 1
    return max(0, lo), min(n_layers - 1, hi)


def check_layers(field: str, size: int, layers: Sequence[int], n_layers: int) -> list[int]:
    """Validate a window size and the window centres; empty `layers` means every layer."""
    if size < 1:
        raise ConfigError("the window must hold at least one layer", field)
    if size > n_layers:
        raise ConfigError(f"a window of {size} layers is larger than the model "
                          f"({n_layers} layers)", field)
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise ConfigError(f"layer {bad[0]} is outside the model (0..{n_layers - 1})", "layers")
    return list(layers) or list(range(n_layers))


def check_heads(heads: Sequence[int], n_heads: int) -> None:
    bad = [h for h in heads if not 0 <= h < n_heads]
    if bad:
        raise ConfigError(f"head {bad[0]} is outside the model (0..{n_heads - 1})", "heads")


def keep_known(preds: Sequence[Prediction], known_only: bool) -> list[int]:
    """Indices of the examples to probe: with `known_only`, those the model gets right
    (examples with nothing to check against are kept). None left is an error, not an empty
    result."""
    chosen = [i for i, p in enumerate(preds) if not known_only or p.known is not False]
    if preds and not chosen:
        raise KnowflowError(f"the model gets none of the {len(preds)} facts right, so there is "
                            "nothing to probe; use --all (known_only=false) to probe them anyway")
    return chosen


def recall_examples(model, tokenizer, examples: Sequence[ProbeExample], known_only: bool,
                    probe: str, batch_size: int = 16
                    ) -> tuple[list[Located], list[Prediction], list[int]]:
    """The shared start of every recall probe: check subjects, locate spans, take the model's
    predictions and choose the examples to probe. Returns (located, predictions, chosen)."""
    require_subject(list(examples), probe)
    located = [locate(tokenizer, ex) for ex in examples]
    preds = predict(model, tokenizer, examples, located, batch_size)
    return located, preds, keep_known(preds, known_only)
