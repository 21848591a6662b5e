"""The symbolic fact-recall world of out-of-context reasoning (Huang et al. 2025, sec. 4).

A family pairs a fact relation r1 (answers b_1..b_K) with an implication relation r2 (answers
c_1..c_K) through a fixed bijection b_i -> c_i. Each subject belongs to one or more families
and has one fact per family: (s, r1_f) -> b. Its implication is then (s, r2_f) -> pair(b).
Training shows every fact, but the implications of only a `train_fraction` of each family's
subjects (stratified by fact, so every b has at least one shown implication); the test set is
the implications of the rest. Solving it needs out-of-context reasoning: linking s's fact to
an implication the model never saw for s.

The families are the paper's five association types as abstract token families. Only
city -> language is causal; the counterfactual city -> language, country -> code,
profession -> color and sport -> music pairings are spurious. In a one-hot world the pairing is
an arbitrary bijection either way, which is the point: the mechanism cannot tell causal from
spurious, so generalization and hallucination come from the same place.

Vocabulary (token ids, in order): subjects | r1_f, r2_f for each family | b_f then c_f answers
for each family | noise tokens | <EOS>. Embeddings are one-hot (frozen, tied to the
unembedding), so the model dimension d equals the vocabulary size. A sequence is
[s, r, <EOS>], or, with `seq_len` > 3, s and r at random positions among random noise tokens,
<EOS> last; the model reads out at <EOS>.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FAMILY_NAMES = ("city_language", "cf_city_language", "country_code", "profession_color",
                "sport_music")
CAUSAL_FAMILIES = frozenset({"city_language"})
FACT, IMPL = 0, 1  # example kinds


def family_names(n_families: int) -> tuple[str, ...]:
    """The paper's five names first, then `family_5`, `family_6`, ..."""
    return tuple(FAMILY_NAMES[i] if i < len(FAMILY_NAMES) else f"family_{i}"
                 for i in range(n_families))


@dataclass(frozen=True)
class OcrVocab:
    n_subjects: int
    n_families: int
    n_answers: int  # K: facts per family (= implications per family)
    n_noise: int = 0

    @property
    def first_relation(self) -> int:
        return self.n_subjects

    def fact_relation(self, family: int) -> int:
        return self.n_subjects + 2 * family

    def impl_relation(self, family: int) -> int:
        return self.n_subjects + 2 * family + 1

    def fact_token(self, family: int, b: torch.Tensor | int) -> torch.Tensor | int:
        return self.n_subjects + 2 * self.n_families + 2 * self.n_answers * family + b

    def impl_token(self, family: int, c: torch.Tensor | int) -> torch.Tensor | int:
        return self.fact_token(family, c) + self.n_answers

    @property
    def first_noise(self) -> int:
        return self.n_subjects + 2 * self.n_families + 2 * self.n_answers * self.n_families

    @property
    def eos(self) -> int:
        return self.first_noise + self.n_noise

    @property
    def dim(self) -> int:
        return self.eos + 1

    def impl_candidates(self) -> torch.Tensor:
        """Token ids of each family's implications. (n_families, K)"""
        return torch.stack([self.impl_token(f, torch.arange(self.n_answers))
                            for f in range(self.n_families)])

    def fact_candidates(self) -> torch.Tensor:
        """Token ids of each family's facts. (n_families, K)"""
        return torch.stack([self.fact_token(f, torch.arange(self.n_answers))
                            for f in range(self.n_families)])


@dataclass(frozen=True)
class OcrWorld:
    """Who belongs to which family, their facts, the pairing, and which implications train."""

    vocab: OcrVocab
    member: torch.Tensor  # (n_subjects, n_families) bool: subject belongs to family
    fact: torch.Tensor  # (n_subjects, n_families) fact index b in 0..K-1, -1 if not a member
    pairing: torch.Tensor  # (n_families, K): implication index c of fact b
    impl_train: torch.Tensor  # (n_subjects, n_families) bool: implication shown in training

    @property
    def names(self) -> tuple[str, ...]:
        return family_names(self.vocab.n_families)

    def implication(self) -> torch.Tensor:
        """(n_subjects, n_families) implication index c, -1 where not a member."""
        fam = torch.arange(self.vocab.n_families).expand_as(self.fact)
        c = self.pairing[fam, self.fact.clamp(min=0)]
        return torch.where(self.member, c, torch.full_like(c, -1))


@dataclass(frozen=True)
class OcrData:
    """A set of examples. tokens: (N, L); the rest (N,)."""

    tokens: torch.Tensor  # (N, L) token ids, <EOS> last
    answer: torch.Tensor  # (N,) target token id
    kind: torch.Tensor  # (N,) FACT or IMPL
    family: torch.Tensor  # (N,) family index
    subject: torch.Tensor  # (N,) subject token id

    def __len__(self) -> int:
        return int(self.answer.shape[0])

    def select(self, keep: torch.Tensor) -> OcrData:
        return OcrData(*(t[keep] for t in (self.tokens, self.answer, self.kind, self.family,
                                            self.subject)))

    @staticmethod
    def stack(items: list[OcrData]) -> OcrData:
        """Seed-batched data: every field gains a leading seed dimension."""
        return OcrData(*(torch.stack([getattr(d, f) for d in items]) for f in
                         ("tokens", "answer", "kind", "family", "subject")))


def membership(n_subjects: int, n_families: int, families_per_subject: int) -> torch.Tensor:
    """Subject i belongs to families i, i+1, ..., i+m-1 (mod F): every family equally full."""
    member = torch.zeros(n_subjects, n_families, dtype=torch.bool)
    for j in range(families_per_subject):
        member[torch.arange(n_subjects), (torch.arange(n_subjects) + j) % n_families] = True
    return member


def make_world(n_subjects: int, n_families: int, n_answers: int, families_per_subject: int,
               train_fraction: float, seed: int, n_noise: int = 0) -> OcrWorld:
    """Draw facts (balanced over b within each family), pairings and the train/test split.

    Within each (family, b) group of n subjects, round(train_fraction * n) subjects (at least
    1, at most n - 1) have their implication shown in training. Group sizes, and so the numbers
    of train and test examples, depend only on the sizes, never on the seed.
    """
    gen = torch.Generator().manual_seed(seed)
    vocab = OcrVocab(n_subjects, n_families, n_answers, n_noise)
    member = membership(n_subjects, n_families, families_per_subject)
    fact = torch.full((n_subjects, n_families), -1, dtype=torch.long)
    impl_train = torch.zeros(n_subjects, n_families, dtype=torch.bool)
    pairing = torch.stack([torch.randperm(n_answers, generator=gen) for _ in range(n_families)])
    for f in range(n_families):
        subjects = torch.nonzero(member[:, f]).flatten()
        order = subjects[torch.randperm(len(subjects), generator=gen)]
        fact[order, f] = torch.arange(len(order)) % n_answers
        for b in range(n_answers):
            group = order[fact[order, f] == b]  # already in random order
            n_train = min(max(round(train_fraction * len(group)), 1), len(group) - 1)
            impl_train[group[:n_train], f] = True
    return OcrWorld(vocab, member, fact, pairing, impl_train)


def _sequences(vocab: OcrVocab, subject: torch.Tensor, relation: torch.Tensor, seq_len: int,
               gen: torch.Generator) -> torch.Tensor:
    """(N,) subjects and relations -> (N, seq_len) token ids with <EOS> last."""
    n = len(subject)
    if seq_len == 3:
        return torch.stack([subject, relation, torch.full_like(subject, vocab.eos)], dim=1)
    tokens = vocab.first_noise + torch.randint(0, vocab.n_noise, (n, seq_len), generator=gen)
    tokens[:, -1] = vocab.eos
    pos = torch.argsort(torch.rand(n, seq_len - 1, generator=gen), dim=1)[:, :2]  # (N, 2)
    rows = torch.arange(n)
    tokens[rows, pos[:, 0]] = subject
    tokens[rows, pos[:, 1]] = relation
    return tokens


def datasets(world: OcrWorld, seq_len: int = 3, seed: int = 0) -> tuple[OcrData, OcrData]:
    """(train, test): train = every fact + shown implications; test = hidden implications.

    Examples are ordered by family, then kind, then subject, so seeds line up row for row.
    """
    gen = torch.Generator().manual_seed(seed + 7919)
    vocab = world.vocab
    impl = world.implication()
    parts: dict[str, list[OcrData]] = {"train": [], "test": []}
    for f in range(vocab.n_families):
        members = torch.nonzero(world.member[:, f]).flatten()
        for split, kind, subj in (
                ("train", FACT, members),
                ("train", IMPL, members[world.impl_train[members, f]]),
                ("test", IMPL, members[~world.impl_train[members, f]])):
            if kind == FACT:
                rel, ans = vocab.fact_relation(f), vocab.fact_token(f, world.fact[subj, f])
            else:
                rel, ans = vocab.impl_relation(f), vocab.impl_token(f, impl[subj, f])
            n = len(subj)
            tokens = _sequences(vocab, subj, torch.full((n,), rel), seq_len, gen)
            parts[split].append(OcrData(tokens, ans, torch.full((n,), kind),
                                        torch.full((n,), f), subj.clone()))
    train, test = (OcrData(*(torch.cat([getattr(p, name) for p in parts[split]]) for name in
                             ("tokens", "answer", "kind", "family", "subject")))
                   for split in ("train", "test"))
    return train, test
