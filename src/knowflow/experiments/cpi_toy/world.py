"""The token world of the context-parametric inversion theory (Goyal et al., ICLR 2025, sec. 5).

Tokens are subjects S, context/answer tokens A and one relation token r. Every token has an
orthonormal embedding x~ (here one-hot); subjects and contexts additionally share a direction,
theta_S or theta_C (orthogonal to each other and to every x~):

    phi(s) = (s~ + theta_S) / sqrt(2),   phi(c) = (c~ + theta_C) / sqrt(2),   phi(r) = r~.

Inputs are `[c, s, r]` (with context) or `[s, r]` (without), and the answer is an A token.
Subjects are split into groups that never overlap: unmemorized subjects for context-critical
(C) points, memorized subjects for C+S and S points and for counterfactual augmentation, and
held-out memorized subjects that only the counterfactual test set uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from knowflow.data.instructions import KINDS
from knowflow.train.criticality import register_no_context

# kinds of examples, as codes in `ToyData.kind`: the schema's C, C+S, S and CF (counterfactual
# augmentation), and the counterfactual test set
C, CS, S, CF, TEST = 0, 1, 2, 3, 4
KIND_NAMES = dict(zip((C, CS, S, CF), KINDS, strict=True))  # code -> schema kind


@dataclass(frozen=True)
class ToyVocab:
    n_subjects: int
    n_answers: int

    @property
    def relation(self) -> int:
        return self.n_subjects + self.n_answers

    @property
    def pad(self) -> int:
        return self.relation + 1  # zero embedding, masked out of attention

    @property
    def dim(self) -> int:
        return self.relation + 1 + 2  # one-hot block, then theta_S, theta_C

    def answer_token(self, answer: torch.Tensor | int) -> torch.Tensor | int:
        return answer + self.n_subjects


def embeddings(vocab: ToyVocab, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """phi for every token id (pad included, as a zero row). Shape (n_tokens + 1, d)."""
    n_tok, d = vocab.relation + 1, vocab.dim
    phi = torch.zeros(n_tok + 1, d, dtype=dtype)
    phi[:n_tok, :n_tok] = torch.eye(n_tok, dtype=dtype)
    theta_s, theta_c = d - 2, d - 1
    subjects = slice(0, vocab.n_subjects)
    answers = slice(vocab.n_subjects, vocab.relation)
    phi[subjects, theta_s] = 1.0
    phi[answers, theta_c] = 1.0
    phi[subjects] /= 2**0.5
    phi[answers] /= 2**0.5
    return phi


def theta_directions(vocab: ToyVocab, dtype: torch.dtype = torch.float64
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(theta_S, theta_C) as unit vectors in R^d."""
    theta_s = torch.zeros(vocab.dim, dtype=dtype)
    theta_c = torch.zeros(vocab.dim, dtype=dtype)
    theta_s[-2] = 1.0
    theta_c[-1] = 1.0
    return theta_s, theta_c


@dataclass(frozen=True)
class ToyData:
    """A set of examples. tokens/mask: (N, 3); answer, kind, subject: (N,)."""

    tokens: torch.Tensor  # (N, 3) token ids, `[c, s, r]` or `[pad, s, r]`
    mask: torch.Tensor  # (N, 3) True where a real token is
    answer: torch.Tensor  # (N,) index into A (0..n_answers-1)
    kind: torch.Tensor  # (N,) C, CS, S, CF or TEST
    subject: torch.Tensor  # (N,) subject token id
    fact: torch.Tensor  # (N,) the subject's memorized fact (index into A), -1 if none

    def __len__(self) -> int:
        return int(self.answer.shape[0])

    def select(self, keep: torch.Tensor) -> ToyData:
        return ToyData(*(t[keep] for t in (self.tokens, self.mask, self.answer, self.kind,
                                            self.subject, self.fact)))

    @staticmethod
    def concat(parts: list[ToyData]) -> ToyData:
        return ToyData(*(torch.cat([getattr(p, f) for p in parts]) for f in
                         ("tokens", "mask", "answer", "kind", "subject", "fact")))


@dataclass(frozen=True)
class ToyWorld:
    """Subjects, their facts and the groups they belong to."""

    vocab: ToyVocab
    facts: torch.Tensor  # (n_subjects,) fact index in A; -1 for unmemorized subjects
    groups: dict[str, torch.Tensor]  # group name -> subject ids
    n_heldout_answers: int = 0  # the last answers of A: only counterfactual test contexts

    @property
    def n_finetune_answers(self) -> int:
        """Answers 0..n-1 are facts and finetuning contexts; the rest only test contexts."""
        return self.vocab.n_answers - self.n_heldout_answers

    @property
    def memorized(self) -> torch.Tensor:
        return torch.nonzero(self.facts >= 0).flatten()


GROUP_ORDER = ("unmemorized", "c_plus_s", "s_seen", "s_unseen", "augment", "test")


def make_world(sizes: dict[str, int], n_answers: int, seed: int, n_heldout_answers: int = 0
               ) -> ToyWorld:
    """Allocate disjoint subject groups (`GROUP_ORDER` names -> counts) and draw their facts.

    Facts and finetuning contexts come from the first `n_answers - n_heldout_answers` answers;
    the held-out answers appear only as counterfactual test contexts, so finetuning cannot
    teach their value embeddings anything token-specific.

    Every group but `unmemorized` and `s_unseen` is memorized: it has a fact in A that the
    pretrained value matrix knows. `s_unseen` subjects have a fact too, but the pretrained model
    does not know it (an S point on a fact not seen in pretraining).
    """
    gen = torch.Generator().manual_seed(seed)
    groups, start = {}, 0
    for name in GROUP_ORDER:
        n = sizes.get(name, 0)
        groups[name] = torch.arange(start, start + n)
        start += n
    vocab = ToyVocab(n_subjects=start, n_answers=n_answers)
    facts = torch.randint(0, n_answers - n_heldout_answers, (start,), generator=gen)
    facts[groups["unmemorized"]] = -1
    return ToyWorld(vocab, facts, groups, n_heldout_answers)


def _other_answer(avoid: torch.Tensor, n_answers: int, gen: torch.Generator) -> torch.Tensor:
    """A uniformly random answer different from `avoid`, elementwise."""
    shift = torch.randint(1, n_answers, avoid.shape, generator=gen)
    return (avoid + shift) % n_answers


def _examples(world: ToyWorld, subjects: torch.Tensor, context: torch.Tensor | None,
              answer: torch.Tensor, kind: int) -> ToyData:
    vocab, n = world.vocab, len(subjects)
    tokens = torch.full((n, 3), vocab.pad, dtype=torch.long)
    mask = torch.ones(n, 3, dtype=torch.bool)
    if context is None:
        mask[:, 0] = False
    else:
        tokens[:, 0] = vocab.answer_token(context)
    tokens[:, 1] = subjects
    tokens[:, 2] = vocab.relation
    fact = world.facts[subjects]
    return ToyData(tokens, mask, answer.clone(), torch.full((n,), kind), subjects.clone(), fact)


def finetune_set(world: ToyWorld, n_c: int, n_cs: int, n_s_seen: int = 0, n_s_unseen: int = 0,
                 n_aug: int = 0, seed: int = 0) -> ToyData:
    """The finetuning mixture: the first n of each group, one example per subject.

    C: unmemorized subject, random context, answer = context.  C+S: memorized subject, context =
    its fact.  S: no context, answer = the fact (seen: memorized; unseen: not in pretraining).
    CF (counterfactual augmentation): memorized subject, a context that differs from its fact,
    answer = context.
    """
    gen = torch.Generator().manual_seed(seed + 1)
    g, n_answers = world.groups, world.n_finetune_answers
    parts = []
    for name, n in (("unmemorized", n_c), ("c_plus_s", n_cs), ("s_seen", n_s_seen),
                    ("s_unseen", n_s_unseen), ("augment", n_aug)):
        if n > len(g[name]):
            raise ValueError(f"group {name} has {len(g[name])} subjects, {n} requested")
    if n_c:
        subj = g["unmemorized"][:n_c]
        ctx = torch.randint(0, n_answers, (n_c,), generator=gen)
        parts.append(_examples(world, subj, ctx, ctx, C))
    if n_cs:
        subj = g["c_plus_s"][:n_cs]
        parts.append(_examples(world, subj, world.facts[subj], world.facts[subj], CS))
    for name, n in (("s_seen", n_s_seen), ("s_unseen", n_s_unseen)):
        if n:
            subj = g[name][:n]
            parts.append(_examples(world, subj, None, world.facts[subj], S))
    if n_aug:
        subj = g["augment"][:n_aug]
        ctx = _other_answer(world.facts[subj], n_answers, gen)
        parts.append(_examples(world, subj, ctx, ctx, CF))
    if not parts:
        raise ValueError("empty finetuning mixture")
    return ToyData.concat(parts)


def counterfactual_test_set(world: ToyWorld, seed: int = 0) -> ToyData:
    """Held-out memorized subjects with a context that contradicts their fact; answer = context."""
    gen = torch.Generator().manual_seed(seed + 2)
    subj = world.groups["test"]
    if world.n_heldout_answers:
        ctx = world.n_finetune_answers + torch.randint(0, world.n_heldout_answers, subj.shape,
                                                       generator=gen)
    else:
        ctx = _other_answer(world.facts[subj], world.vocab.n_answers, gen)
    return _examples(world, subj, ctx, ctx, TEST)


def no_context(data: ToyData) -> ToyData:
    """The same examples with the context removed (`[s, r]`), for context-criticality scores."""
    mask = data.mask.clone()
    mask[:, 0] = False
    return ToyData(data.tokens, mask, data.answer, data.kind, data.subject, data.fact)


@register_no_context(ToyData)
@torch.no_grad()
def no_context_loss(model, data: ToyData, tokenizer=None) -> torch.Tensor:
    """The answer's loss without the context, for curation by no-context loss. (n,)"""
    bare = no_context(data)
    logits, _ = model(bare.tokens, bare.mask)  # (n, A)
    return F.cross_entropy(logits, bare.answer, reduction="none")
