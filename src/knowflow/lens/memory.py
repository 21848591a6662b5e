"""How much memory a job needs, worked out from the model's shape before the job starts.

`--max-memory GIB` bounds what a job's model and its largest batch may hold on the device
(the weights plus that batch's activations; Python's and torch's own few hundred MiB are not
counted). Every job holds at most one batch of activations at a time and streams or keeps only
small per-item records, so its peak is the weights plus its largest batch:

- inference (eval, explain, the probes): `rows` sequences of `tokens` new tokens after
  `cached` tokens already in the KV cache. The KV cache of every layer,
  2 x layers x kv_heads x head_dim x rows x (cached + tokens); one layer's transient working
  set, rows x tokens x (6 d_model + 4 d_ff); the attention mask, rows x tokens x (cached +
  tokens) (one byte a boolean; the scorer's dense 4D masks: twice the weights' dtype, the
  mask and the model's copy, for prompts of up to `scorer.LONG_PROMPT` tokens); with eager
  attention the scores, rows x heads x tokens x (cached + tokens) (SDPA's kernels do not
  hold them); and the float32 logits kept, rows x positions x vocab, twice (a log-softmax
  copy).
- training (sft): every layer's activations saved for the backward pass, rows x tokens x
  (16 d_model + 8 d_ff) per layer, and one layer's attention scores, rows x heads x tokens^2
  (SDPA's CPU backward holds them a layer at a time; eager attention: every layer's); the
  boolean mask; the float32 logits, their log-softmax and gradient (3 x rows x tokens x
  vocab); and for the trainable parameters a float32 gradient and Adam's two moments (3 x 4
  bytes each).

The per-token constants (6 d_model + 4 d_ff; 16 d_model + 8 d_ff; the dense mask counted
twice) were set from peak resident memory measured at two sizes each (eval log-likelihood:
3000-token prompts at batch 8 and 2000 at batch 4; sft: 1200 tokens at batch 4 and 1800 at
batch 2) on a 3-layer, 192-wide random Llama with SDPA attention, on a CPU;
tests/lens/test_memory.py measures other sizes and checks the estimate within a factor of
two either way (real model shapes, GPUs and their kernels are not measured). Activations
are counted at the weights' dtype (float32 on a CPU, bf16 on a GPU). A job whose estimate
exceeds the budget is refused before anything is written, with the numbers and the largest
batch that fits (`check_budget`); where the batch is an internal detail that does not change
results (the probes' variant rows) it is sized down instead (`fit_rows`). A budget also
sets glibc's malloc to return freed large blocks to the system (`lens.allocator`), without
which the resident peak of the same job was bimodal, up to 1.44x the estimate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from knowflow.errors import ConfigError
from knowflow.lens.allocator import hold_to_budget
from knowflow.lens.scorer import LONG_PROMPT, PREFILL_CHUNK

# what --max-memory means, for jobs that batch prompts (eval, explain, sft) and for probes
# that batch variant rows of one prompt (knockout, heads)
MAX_MEMORY_HELP = ("GiB the model and its largest batch may hold on the device (weights + "
                   "activations, estimated from the model's shape before the job starts; "
                   "Python's and torch's own memory not counted): a job that would need more "
                   "is refused with the numbers and a batch size that fits.")
ROWS_MEMORY_HELP = ("GiB the model and one batch of variant rows may hold (estimated from the "
                    "model's shape; lens/memory.py): fewer rows per pass where the default "
                    "would not fit, refused with the numbers when one row does not.")

GIB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the estimate needs of a model: its size and transformer dimensions."""

    params: int          # every parameter (tied weights once)
    bytes_per: int       # bytes per weight (4 float32, 2 bf16/fp16)
    layers: int
    d_model: int
    d_ff: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    eager: bool = False  # eager attention: the full score matrix is held

    @property
    def weights(self) -> int:
        return self.params * self.bytes_per


def shape_of(model) -> Shape:
    """The `Shape` of a loaded HF causal LM (its config and parameters)."""
    cfg = model.config
    cfg = getattr(cfg, "text_config", None) or cfg
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    d_model = _first(cfg, "hidden_size", "n_embd", "d_model")
    param = next(model.parameters())
    return Shape(
        params=sum(p.numel() for p in model.parameters()),
        bytes_per=param.element_size(),
        layers=_first(cfg, "num_hidden_layers", "n_layer", "num_layers"),
        d_model=d_model,
        d_ff=_first(cfg, "intermediate_size", "n_inner", "ffn_dim", default=4 * d_model)
        or 4 * d_model,
        heads=heads,
        kv_heads=_first(cfg, "num_key_value_heads", default=heads) or heads,
        head_dim=_first(cfg, "head_dim", default=d_model // heads) or d_model // heads,
        vocab=cfg.vocab_size,
        eager=getattr(model.config, "_attn_implementation", "eager") == "eager")


def _first(cfg, *names: str, default: int | None = None) -> int:
    for name in names:
        value = getattr(cfg, name, None)
        if isinstance(value, int):
            return value
    if default is None:
        raise ConfigError(f"the model config has none of {', '.join(names)}", "max_memory",
                          "leave --max-memory out for this model")
    return default


def inference_bytes(s: Shape, rows: int, tokens: int, cached: int = 0,
                    logit_positions: int = 1, dense_mask: bool = False) -> int:
    """Activations of one forward pass (see the module docstring), in bytes. `dense_mask`:
    a 4D mask in the weights' dtype (the scorer's trie rows), else a boolean one."""
    seq = cached + tokens
    kv = 2 * s.layers * s.kv_heads * s.head_dim * rows * seq * s.bytes_per
    layer = rows * tokens * (6 * s.d_model + 4 * s.d_ff) * s.bytes_per
    mask = rows * tokens * seq * (2 * s.bytes_per if dense_mask else 1)
    scores = rows * s.heads * tokens * seq * s.bytes_per if s.eager else 0
    logits = 2 * rows * logit_positions * s.vocab * 4
    return kv + layer + mask + scores + logits


def training_bytes(s: Shape, rows: int, tokens: int, trainable: int) -> int:
    """Activations, logits and optimizer state of one training step, in bytes."""
    saved = s.layers * rows * tokens * (16 * s.d_model + 8 * s.d_ff) * s.bytes_per
    scores = rows * s.heads * tokens * tokens * s.bytes_per * (s.layers if s.eager else 1)
    mask = rows * tokens * tokens                    # the boolean causal/padding mask
    logits = 3 * rows * tokens * s.vocab * 4
    return saved + scores + mask + logits + 3 * 4 * trainable


def largest_batch(needed: Callable[[int], int], budget: int, batch: int) -> int:
    """The largest batch in 1..`batch` whose `needed(batch)` bytes fit `budget` (0: none)."""
    lo, hi = 0, batch
    while lo < hi:                      # needed grows with the batch: bisect
        mid = (lo + hi + 1) // 2
        if needed(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def check_budget(shape: Shape, activations: Callable[[int], int], batch: int,
                 max_memory: float | None, knob: str = "--batch-size", what: str = "") -> int:
    """Refuse a job whose weights plus `activations(batch)` exceed `max_memory` GiB, naming
    the numbers and the largest batch that fits; returns the bytes it needs. `what` says
    what sets the size (e.g. "prompts of up to 812 tokens")."""
    needed = shape.weights + activations(batch)
    if max_memory is not None:
        hold_to_budget()
    if max_memory is None or needed <= max_memory * GIB:
        return needed
    budget = int(max_memory * GIB) - shape.weights
    fits = largest_batch(activations, budget, batch) if budget > 0 else 0
    about = f" ({what})" if what else ""
    head = (f"needs about {gib(needed)} at batch {batch}{about}: weights {gib(shape.weights)}"
            f" + activations {gib(activations(batch))}; --max-memory {max_memory:g} GiB")
    if fits:
        sep = "" if knob.endswith("=") else " "
        raise ConfigError(head, "max_memory", f"try {knob}{sep}{fits} (about "
                          f"{gib(shape.weights + activations(fits))}), or raise --max-memory")
    one = shape.weights + activations(1)
    raise ConfigError(head, "max_memory",
                      f"even batch 1 needs about {gib(one)}: give --max-memory "
                      f"{one / GIB:.1f} or more, shorter inputs, or a smaller dtype")


def fit_rows(shape: Shape, activations: Callable[[int], int], batch: int,
             max_memory: float | None, what: str = "") -> int:
    """The batch to run: `batch`, or fewer rows when `max_memory` GiB would not hold it (for
    batches whose size does not change results); refuses when one row does not fit."""
    if max_memory is None:
        return batch
    hold_to_budget()
    fits = largest_batch(activations, int(max_memory * GIB) - shape.weights, batch)
    if fits == 0:
        check_budget(shape, activations, 1, max_memory, what=what)
    return max(fits, 1)


def eval_bytes(shape: Shape, longest: int, new: int, prefill: bool = True,
               short: int | None = None) -> Callable[[int], int]:
    """eval: activations of a batch of `rows` prompts of up to `longest` tokens and `new`
    answer tokens. Log-likelihood scoring batches prompts of up to `scorer.LONG_PROMPT` tokens
    (`short`: the longest of them; default min(longest, LONG_PROMPT)) into tree rows with a
    dense 4D mask; a longer prompt runs alone in `PREFILL_CHUNK`-token passes, its KV cache
    held twice (the grown prefix and the candidates' copy). With `prefill` (generation,
    contrastive decoding), also a batch of whole prompts left-padded in one prefill with a
    boolean mask."""
    s = min(longest, LONG_PROMPT) if short is None else short

    def loglik(rows: int) -> int:
        tree = inference_bytes(shape, rows, s + new, logit_positions=new,
                               dense_mask=True) if s else 0
        if longest <= LONG_PROMPT:
            return tree
        alone = (inference_bytes(shape, 1, PREFILL_CHUNK, cached=longest - PREFILL_CHUNK)
                 + inference_bytes(shape, 1, new, cached=longest, logit_positions=new))
        return max(tree, alone)

    if not prefill:
        return loglik
    return lambda rows: max(loglik(rows), inference_bytes(shape, rows, longest + new,
                                                          logit_positions=new))


def variant_bytes(shape: Shape, tokens: int) -> Callable[[int], int]:
    """The probes: `rows` copies of a `tokens`-long prompt's KV cache, its last position run;
    beside them the prompt's own cache and the copy `Prefix.expand` repeats (two rows more:
    measured on SmolLM2-135M's shape at 2k tokens, 4 and 16 rows, they were the estimate's
    missing third at 4 rows); at least the prompt's own pass (`prompt_pass_bytes`)."""
    own = inference_bytes(shape, 1, 1, cached=tokens - 1)
    whole = prompt_pass_bytes(shape, tokens)(1)
    return lambda rows: max(inference_bytes(shape, rows, 1, cached=tokens - 1) + 2 * own,
                            whole)


def prompt_pass_bytes(shape: Shape, tokens: int) -> Callable[[int], int]:
    """A right-padded forward pass of `rows` whole prompts of up to `tokens` tokens with the
    logits of each row's last position (the probes' prediction, `probes.common.predict`)."""
    return lambda rows: inference_bytes(shape, rows, tokens, logit_positions=rows)


def step_bytes(shape: Shape, longest: int, full: bool) -> Callable[[int], int]:
    """sft: a step of `rows` examples of up to `longest` tokens. Trainable parameters: all
    for full finetuning, else at most an eighth (LoRA adds about 1%, QK-only trains the
    query and key projections)."""
    trainable = shape.params if full else shape.params // 8
    return lambda rows: training_bytes(shape, rows, longest, trainable)


def prompt_rows(model, tokens: int, batch: int, max_memory: float | None) -> int:
    """Variant rows per pass for the probes, which copy a prompt's KV cache once per row and
    run its last position: `batch`, or as many as `max_memory` GiB holds (the rows are
    independent, so their number changes no result)."""
    if max_memory is None:
        return batch
    shape = shape_of(model)
    return fit_rows(shape, variant_bytes(shape, tokens), batch, max_memory,
                    f"a prompt of {tokens} tokens")


def prediction_rows(model, tokens: int, batch: int, max_memory: float | None) -> int:
    """Prompts per pass for the probes' prediction of the model's own answer: `batch`, or as
    many prompts of up to `tokens` tokens as `max_memory` GiB holds (changes no result)."""
    if max_memory is None:
        return batch
    shape = shape_of(model)
    return fit_rows(shape, prompt_pass_bytes(shape, tokens), batch, max_memory,
                    f"prompts of up to {tokens} tokens")


def check_step_memory(model, longest: int, batch: int, full: bool, max_memory: float) -> None:
    """sft: refuse a training step of `batch` examples of up to `longest` tokens that would
    not fit (`step_bytes`)."""
    shape = shape_of(model)
    check_budget(shape, step_bytes(shape, longest, full), batch, max_memory,
                 what=f"examples of up to {longest} tokens")


def check_max_memory(max_memory: float | None, field: str = "max_memory") -> None:
    if max_memory is not None and not max_memory > 0:
        raise ConfigError(f"must be positive (GiB), got {max_memory}", field)
    if max_memory is not None:      # as early as the config exists, before the model loads
        hold_to_budget()
