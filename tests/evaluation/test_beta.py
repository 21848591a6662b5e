"""The adaptive plausibility constraint (--beta) against references: beta 0 is the CAD/AdaCAD of
before the constraint existed, beta 1 is greedy on the with-context stream, beta 0.2 matches a
naive full-forward loop with the eligible set computed by hand in probability space, and
teacher-forced scoring ignores beta."""

import numpy as np
import pytest
import torch

from helpers import contrastive_setup
from knowflow.errors import ConfigError
from knowflow.evaluation.closed_class import CLOSED_CLASS
from knowflow.evaluation.decoding import (
    Method,
    cad_logits,
    generate_contrastive,
    jsd,
    parse_methods,
    plausible,
    score_contrastive,
)
from knowflow.evaluation.generate import _eos_ids, clean_output, generate, stop_table

NEW = 6


class Unconstrained(Method):
    """CAD / AdaCAD as they decoded before --beta: the argmax of the combined logits."""

    def next_logits(self, z_ctx, z_base):
        return self.logits(z_ctx, z_base)


@pytest.fixture(scope="module")
def setup():
    return contrastive_setup(seed=3, capitals=4, quotes=2)


@pytest.mark.parametrize("base, alpha", [("cad", 1.0), ("cad", 3.0), ("adacad", 1.0)])
def test_beta_zero_is_unconstrained_exactly(setup, base, alpha):
    tok, model, _, seqs, bases = setup
    got = generate_contrastive(model, tok, seqs, bases, Method(base, alpha, beta=0.0),
                               batch_size=3, max_new_tokens=NEW)
    want = generate_contrastive(model, tok, seqs, bases, Unconstrained(base, alpha),
                                batch_size=3, max_new_tokens=NEW)
    assert got == want


@pytest.mark.parametrize("base", ["cad", "adacad"])
def test_beta_one_is_greedy_with_context(setup, base):
    tok, model, _, seqs, bases = setup
    got = generate_contrastive(model, tok, seqs, bases, Method(base, 2.0, beta=1.0),
                               batch_size=3, max_new_tokens=NEW)
    assert got == generate(model, tok, seqs, batch_size=3, max_new_tokens=NEW)


def _naive(model, tok, seq, base, alpha, beta, adaptive, guard=False):
    """One prompt, full forward passes, the eligible set by hand: p >= beta * max p; with
    `guard`, the guard's rules (guard.py) applied to each token's text by hand, the passage
    words' first tokens found by encoding each word with and without a leading space."""
    table = stop_table(tok, model.get_output_embeddings().weight.shape[0], _eos_ids(model))
    n_vocab = model.get_output_embeddings().weight.shape[0]
    text = [tok.decode([i]) if i < len(tok) else "" for i in range(n_vocab)]
    special = set(tok.all_special_ids) | set(_eos_ids(model))

    asked = {text[i].strip().lower() for i in base  # the prompt's lower-case words
             if any(c.isalpha() for c in text[i]) and text[i] == text[i].lower()}

    def words(ids):  # (the word's token texts, lower-cased, capitalised?) per word
        found: list = []
        for k, i in enumerate(ids):
            t = text[i]
            if found and k and t[:1].isalpha() and text[ids[k - 1]][-1:].isalpha():
                found[-1][0].append(t.strip().lower())
            else:
                letter = any(c.isalpha() for c in t)
                found.append(([t.strip().lower() if letter else None], letter and t != t.lower()))
        return [(tuple(w), cap) for w, cap in found]

    shown, held = words(seq), words(base)  # a capitalised run's word the context repeats
    asked |= {w[0] for k, (w, cap) in enumerate(held) if cap
              and shown.count((w, True)) + shown.count((w, False))
              > held.count((w, True)) + held.count((w, False))
              and any(held[j][1] for j in (k - 1, k + 1) if 0 <= j < len(held))}

    def ends(i):  # end of sequence, a newline, blank, punctuation only, a closed-class word,
        t = text[i]  # or a word of the no-context prompt
        return i in special or "\n" in t or not any(c.isalnum() for c in t) \
            or t.strip().lower() in CLOSED_CLASS or t.strip().lower() in asked

    def passage_words(ids):  # whitespace chunks, edges trimmed to letters/digits, and parts
        found = []
        for chunk in tok.decode(ids).split():
            while chunk and not chunk[0].isalnum():
                chunk = chunk[1:]
            while chunk and not chunk[-1].isalnum():
                chunk = chunk[:-1]
            found += [w for w in {chunk, *chunk.replace("\u2013", "-").split("-")}
                      if w[:1].isalpha()]
        return found

    shown_words, held_words = passage_words(seq), passage_words(base)
    starts = {tok.encode(sp + w[0].swapcase() * sw + w[sw:], add_special_tokens=False)[0]
              for w in set(shown_words) if shown_words.count(w) > held_words.count(w)
              for sp in ("", " ") for sw in (0, 1)}

    out: list[int] = []
    has_text = False
    for _ in range(NEW):
        with torch.no_grad():
            z_c = model(input_ids=torch.tensor([seq + out])).logits[0, -1].double()
            z_b = model(input_ids=torch.tensor([base + out])).logits[0, -1].double()
        a = float(jsd(z_c, z_b)) if adaptive else alpha
        scores = (1 + a) * z_c - a * z_b
        p = z_c.softmax(-1)
        scores[p < beta * p.max()] = -np.inf
        t = int(scores.argmax())
        if guard:
            top = int(z_c.argmax())
            mid = bool(out) and text[out[-1]][-1:].isalpha()
            supported = z_c.log_softmax(-1)[top] >= z_b.log_softmax(-1)[top]
            if ends(top) or (mid and text[top][:1].isalpha()) or supported:
                t = top
            else:
                for i in range(n_vocab):  # the contrast's own word starts a passage word
                    if ends(i) or (mid and text[i][:1].isalpha()) or (
                            i != top and any(c.isalpha() for c in text[i]) and i not in starts):
                        scores[i] = -np.inf
                t = int(scores.argmax())
        if table.eos[t]:
            break
        out.append(t)
        if table.newline[t] and (has_text or table.text_first[t]):
            break
        has_text = has_text or not bool(table.blank[t])
    return clean_output(tok.decode(out, skip_special_tokens=True))


@pytest.mark.parametrize("guard", [False, True], ids=["plain", "guarded"])
@pytest.mark.parametrize("base", ["cad", "adacad"])
def test_constrained_matches_naive_loop(setup, base, guard):
    tok, model, _, seqs, bases = setup
    got = generate_contrastive(model, tok, seqs[:3], bases[:3],
                               Method(base, 2.0, beta=0.2, guard=guard),
                               batch_size=2, max_new_tokens=NEW)
    want = [_naive(model, tok, s, b, 2.0, 0.2, base == "adacad", guard)
            for s, b in zip(seqs[:3], bases[:3], strict=True)]
    assert got == want


def test_plausible_by_hand():
    z = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    scores = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    assert torch.equal(plausible(z, scores, 0.0), scores)
    # 0.5 * 0.5 = 0.25: tokens 0 and 1 stay
    assert plausible(z, scores, 0.5).tolist() == [[0.0, 1.0, -np.inf, -np.inf]]
    assert plausible(z, scores, 0.25).argmax().item() == 2   # 0.15 >= 0.125
    assert plausible(z, scores, 1.0).tolist() == [[0.0, -np.inf, -np.inf, -np.inf]]
    # the constrained argmax never leaves the with-context model's plausible set
    z_c, z_b = torch.randn(50, 30), torch.randn(50, 30) * 3
    pick = plausible(z_c, cad_logits(z_c, z_b, 5.0), 0.1).argmax(-1)
    p = z_c.softmax(-1)
    assert bool((p.gather(-1, pick[:, None]).squeeze(-1) >= 0.1 * p.max(-1).values).all())


def test_scoring_ignores_beta(setup):
    tok, model, prompts, seqs, bases = setup
    conts = [[p.answer_prefix + "Paris", p.answer_prefix + "Rome"] for p in prompts]
    plain = score_contrastive(model, tok, seqs, bases, conts, Method("cad", 1.0), batch_size=3)
    beta = score_contrastive(model, tok, seqs, bases, conts, Method("cad", 1.0, beta=0.5),
                             batch_size=3)
    assert plain == beta


def test_beta_registry():
    ms = parse_methods("greedy,cad,adacad,coiecd,cocoa", "1", "0,0.1")
    assert [m.label for m in ms] == ["greedy", "cad(a=1)", "cad(a=1,b=0.1)", "adacad",
                                     "adacad(b=0.1)", "coiecd", "cocoa", "cocoa(b=0.1)"]
    assert [m.beta for m in ms] == [0.0, 0.0, 0.1, 0.0, 0.1, 0.0, 0.0, 0.1]
    assert all(m.guard for m in ms)
    assert [m.label for m in parse_methods("greedy,cad", 1, 0, guard=False)] == \
        ["greedy", "cad(a=1)[unguarded]"]
    for bad in ("x", "-0.1", "1.5", "nan", ""):
        with pytest.raises(ConfigError):
            parse_methods("cad", 1.0, bad)
