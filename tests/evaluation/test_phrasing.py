"""cf-phrasing (the cf-capitals facts in four phrasings) and the generation step that must not
end or garble an answer because of the contrast on function words."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from knowflow.data.phrasing import PHRASINGS
from knowflow.data.suites import get_suite, list_suites
from knowflow.evaluation.decoding import Method
from knowflow.evaluation.generate import decode, prompt_words, token_table

# a toy vocabulary: the model answers "Nepal is Pokhara." (context) or "... Kathmandu."
VOCAB = ["<eos>", ".", " is", " Pok", "hara", " Kathmandu", "Nepal", "k", " The", ",", " seat",
         " city", "Seat", " Communist", " Chinese"]
ID = {t: i for i, t in enumerate(VOCAB)}
TABLE = token_table(VOCAB, [0])


# next-token distributions after each answer prefix (token texts joined), with the context
# and without it: the no-context model is sure of " is" and of Kathmandu, so a contrast
# penalises " is" (the full stop wins) and, inside " Pok|hara", favours the stray "k"
CTX = {(): {"Nepal": 0.9}, ("Nepal",): {" is": 0.55, ".": 0.4},
       ("Nepal", " is"): {" Pok": 0.5, " Kathmandu": 0.45},
       ("Nepal", " is", " Pok"): {"hara": 0.6, "k": 0.3},
       ("Nepal", " is", " Pok", "hara"): {".": 0.9}}
BASE = {(): {"Nepal": 0.9}, ("Nepal",): {" is": 0.97, ".": 0.01},
        ("Nepal", " is"): {" Kathmandu": 0.9, " Pok": 0.02},
        ("Nepal", " is", " Pok"): {"hara": 0.6, "k": 0.001},
        ("Nepal", " is", " Pok", "hara"): {".": 0.9}}


class ScriptStream:
    """A stand-in for `generate.Stream`: next-token logits from a table of answer prefixes."""

    def __init__(self, script: dict, rows: int = 1):
        self.script = script
        self.prefixes: list[tuple[str, ...]] = [()] * rows
        self.logits = self._now()

    def _now(self) -> torch.Tensor:                                # (live, vocab)
        rows = []
        for p in self.prefixes:
            probs = self.script.get(p, {"<eos>": 0.95})
            named = {ID[k]: v for k, v in probs.items()}
            rest = (1.0 - sum(named.values())) / (len(VOCAB) - len(named))
            rows.append([math.log(named.get(i, rest)) for i in range(len(VOCAB))])
        return torch.tensor(rows)

    def keep(self, rows: torch.Tensor) -> None:
        self.prefixes = [self.prefixes[i] for i in rows.tolist()]
        self.logits = self._now()

    def advance(self, token: torch.Tensor) -> None:
        self.prefixes = [p + (VOCAB[t],) for p, t in zip(self.prefixes, token.tolist(),
                                                          strict=True)]
        self.logits = self._now()


def _answer(method: Method) -> str:
    streams = (ScriptStream(CTX), ScriptStream(BASE))
    out = decode(streams, lambda zc, zb, last, rows: method.pick(zc, zb, last, TABLE), 12,
                 TABLE)
    return "".join(VOCAB[t] for t in out[0])


def test_greedy_names_the_context_answer_in_a_sentence():
    assert _answer(Method("greedy")) == "Nepal is Pokhara."


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("cad", 1.0),
                                    Method("adacad", beta=0.3), Method("coiecd")],
                         ids=lambda m: m.label)
def test_contrast_does_not_stop_before_the_answer(method):
    """Plain CAD ends with "Nepal." here: the contrast with the no-context model (sure of
    " is") lifts the full stop over " is". End and punctuation are the with-context model's
    call, so every contrastive method goes on to the name."""
    answer = _answer(method)
    assert answer != "Nepal."
    assert answer.startswith("Nepal is ")


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("adacad", beta=0.3)],
                         ids=lambda m: m.label)
def test_contrast_picks_the_context_name_and_never_splices_it(method):
    """The contrast picks the name (" Pok" over " Kathmandu"); inside the word the
    with-context model finishes it ("hara", not the stray "k" the contrast favours)."""
    assert _answer(method) == "Nepal is Pokhara."


def test_token_table_flags():
    assert TABLE.punct[ID["."]] and TABLE.punct[ID[","]] and not TABLE.punct[ID[" is"]]
    assert TABLE.word_piece[ID["hara"]] and not TABLE.word_piece[ID[" Pok"]]
    assert TABLE.word_end[ID[" Pok"]] and not TABLE.word_end[ID["."]]
    assert TABLE.stops[ID["<eos>"]] and TABLE.stops[ID["."]] and not TABLE.stops[ID["hara"]]
    assert TABLE.closed[ID[" The"]] and TABLE.closed[ID[" is"]] and not TABLE.closed[ID[" Pok"]]
    # one word id per stripped, lower-cased text; none for a token without a letter
    assert TABLE.word[ID["Seat"]] == TABLE.word[ID[" seat"]] != TABLE.word[ID[" city"]]
    assert TABLE.word[ID["."]] == TABLE.word[ID[","]] == -1


def test_prompt_words_are_the_prompts_lower_case_words_in_any_case():
    words = prompt_words(TABLE, [[ID[" The"], ID[" seat"], ID["."], ID[" Pok"]], []])
    assert {VOCAB[i] for i in words[0].nonzero()[:, 0].tolist()} == {" seat", "Seat"}
    assert not words[1].any()
    # with the with-context prompts: a word of a capitalised run of the question that the
    # context repeats ("Communist": twice with the context, once without), not one both
    # prompts hold as often ("Pok"), nor a lone name the context repeats ("Nepal")
    base = [ID[" The"], ID[" Communist"], ID[" Pok"], ID["."], ID["Nepal"]]
    words = prompt_words(TABLE, [base], [[ID[" Communist"], ID[","], ID["Nepal"], *base]])
    assert {VOCAB[i] for i in words[0].nonzero()[:, 0].tolist()} == {" Communist"}


def test_phrasing_suite_asks_every_country_in_every_phrasing():
    assert "cf-phrasing" in list_suites()
    items = get_suite("cf-phrasing")
    capitals = {it.subject: it for it in get_suite("cf-capitals")}
    assert len(items) == len(PHRASINGS) * len(capitals)
    per = Counter(it.meta["phrasing"] for it in items)
    assert set(per) == set(PHRASINGS) and len(set(per.values())) == 1
    assert Counter(it.meta["answer_position"] for it in items).keys() == {"early", "late"}
    for it in items:  # the same facts and counterfactual answers as cf-capitals
        cap = capitals[it.subject]
        assert (it.counterfactual_answer, it.parametric_answer) == \
            (cap.counterfactual_answer, cap.parametric_answer)
        assert it.counterfactual_answer in it.context
        assert it.parametric_answer not in it.context.replace(it.subject, "")
        if it.meta["answer_position"] == "late":
            assert it.context.rstrip(".").endswith(it.counterfactual_answer)
    assert get_suite("cf-phrasing", seed=3) != items
    assert [i.id for i in get_suite("cf-phrasing", limit=20)] == \
        [i.id for i in get_suite("cf-phrasing", limit=20)]


def _logits(probs: dict) -> torch.Tensor:
    """(1, vocab) log-probabilities: the named tokens, the rest shared evenly."""
    rest = (1.0 - sum(probs.values())) / (len(VOCAB) - len(probs))
    return torch.tensor([[math.log(probs.get(t, rest)) for t in VOCAB]])


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("cad", 1.0),
                                    Method("adacad", beta=0.3), Method("cocoa", beta=0.3)],
                         ids=lambda m: m.label)
def test_a_closed_class_word_is_the_models_call(method):
    """The with-context model starts its sentence with " The"; the no-context model is surer
    of it, so the contrast prefers a word piece the context lifts (" Pok"), whose continuation
    the model never planned (on SmolLM2 "B" for Belize City became "Bahia, Bahia, ...").
    A closed-class word the model puts first is emitted; the contrast never picks one over a
    content word the model puts first."""
    z_ctx, z_base = _logits({" The": 0.45, " Pok": 0.4}), _logits({" The": 0.97, " Pok": 0.001})
    none = torch.tensor([-1])
    assert int(method.next_logits(z_ctx, z_base).argmax()) == ID[" Pok"]
    assert int(method.pick(z_ctx, z_base, none, TABLE)) == ID[" The"]
    z_ctx, z_base = _logits({" Pok": 0.45, " The": 0.4}), _logits({" Pok": 0.97, " The": 0.001})
    assert int(method.next_logits(z_ctx, z_base).argmax()) == ID[" The"]
    assert int(method.pick(z_ctx, z_base, none, TABLE)) != ID[" The"]


def test_dev_and_test_countries_are_apart():
    items = get_suite("cf-phrasing")
    dev = {it.subject for it in items if it.meta["split"] == "dev"}
    test = {it.subject for it in items if it.meta["split"] == "test"}
    assert len(dev) == 64 and not dev & test and len(dev | test) == len(items) // len(PHRASINGS)
    assert dev == {it.subject for it in get_suite("cf-phrasing", seed=5)
                   if it.meta["split"] == "dev"}


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("coiecd"),
                                    Method("adacad", beta=0.3), Method("cocoa", beta=0.3)],
                         ids=lambda m: m.label)
def test_the_contrast_overrides_only_a_token_the_context_lowers(method):
    """The model's top token " Pok" is likelier with the context than without: the contrast
    would still prefer a tail token the context lifts more (" Kathmandu" here), a swerve
    ("The capital city of Canada is also Paris." for Toronto on SmolLM2); the model's token is
    kept. When the context lowers the top token (the memorized " Kathmandu"), the contrast
    decides, and picks the context's name."""
    none = torch.tensor([-1])
    z_ctx, z_base = _logits({" Pok": 0.4, " Kathmandu": 0.3}), \
        _logits({" Pok": 0.2, " Kathmandu": 0.0005})
    assert int(method.next_logits(z_ctx, z_base).argmax()) == ID[" Kathmandu"]
    assert int(method.pick(z_ctx, z_base, none, TABLE)) == ID[" Pok"]
    z_ctx, z_base = _logits({" Kathmandu": 0.45, " Pok": 0.4}), \
        _logits({" Kathmandu": 0.97, " Pok": 0.001})
    assert int(method.pick(z_ctx, z_base, none, TABLE)) == ID[" Pok"]


# the "where" phrasing: "Which city is the seat of government of Finland? ..."; after "The"
# the model goes on with " seat", a word of the question, which the no-context model (it has
# only the question) is surer of
SEAT_CTX, SEAT_BASE = {" seat": 0.45, " city": 0.4}, {" seat": 0.97, " city": 0.001}


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("coiecd"),
                                    Method("adacad", beta=0.3), Method("cocoa", beta=0.3)],
                         ids=lambda m: m.label)
def test_a_word_of_the_question_is_the_models_call(method):
    """The contrast prefers " city" over the question's own " seat" because the no-context
    model copies the question more readily, not because of anything the context says: on
    SmolLM2 "The seat of government of Finland is Tampere." became "The city of Paris serves
    as the seat of the Finnish government, ..." under CAD and COIECD. A token that repeats
    a word of the no-context prompt is the with-context model's call, and the contrast never
    picks one."""
    none = torch.tensor([-1])
    z_ctx, z_base = _logits(SEAT_CTX), _logits(SEAT_BASE)
    assert int(method.next_logits(z_ctx, z_base).argmax()) == ID[" city"]
    assert int(method.pick(z_ctx, z_base, none, TABLE)) == ID[" city"]   # no prompt given
    asked = prompt_words(TABLE, [[ID[" seat"]]])
    assert int(method.pick(z_ctx, z_base, none, TABLE, asked)) == ID[" seat"]
    asked = prompt_words(TABLE, [[ID[" city"]]])   # a prompt word the contrast would pick
    z_ctx, z_base = _logits({" Kathmandu": 0.45, " city": 0.4}), \
        _logits({" Kathmandu": 0.97, " city": 0.001})
    assert int(method.pick(z_ctx, z_base, none, TABLE, asked)) == ID[" Kathmandu"]


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("coiecd")],
                         ids=lambda m: m.label)
def test_a_name_in_the_question_stays_the_contrasts(method):
    """A capitalised word of the question is a name, often the example's ("..., for example:
    The capital city of France is Paris."): the model copies it ("The capital city of France
    is Paris." for Kiribati on SmolLM2), and overruling that copy is the contrast's job."""
    none = torch.tensor([-1])
    asked = prompt_words(TABLE, [[ID[" Kathmandu"]]])
    z_ctx, z_base = _logits({" Kathmandu": 0.45, " Pok": 0.4}), \
        _logits({" Kathmandu": 0.97, " Pok": 0.001})
    assert int(method.pick(z_ctx, z_base, none, TABLE, asked)) == ID[" Pok"]


@pytest.mark.parametrize("method", [Method("cad", 1.0, beta=0.3), Method("coiecd"),
                                    Method("adacad", beta=0.3), Method("cocoa", beta=0.3)],
                         ids=lambda m: m.label)
def test_a_name_the_question_and_context_share_is_the_models_call(method):
    """Asked "Who co-wrote The Communist Manifesto?" with a passage that names it too,
    SmolLM2 says "The Communist Manifesto was written by Archimedes."; COIECD swerved at
    " Communist", which the no-context model copies from the question more readily, to
    " Chinese" ("The Chinese-German philosopher and mathematician."). A capitalised word of
    the question that the context repeats is the item's own topic, not the instruction's
    example, so it is the with-context model's call; an example the context does not repeat
    (the prompts hold " Communist" equally often) stays the contrast's."""
    none = torch.tensor([-1])
    z_ctx, z_base = _logits({" Communist": 0.45, " Chinese": 0.4}), \
        _logits({" Communist": 0.97, " Chinese": 0.001})
    question = [ID[" The"], ID[" Communist"]]
    asked = prompt_words(TABLE, [question], [[ID[" Communist"], *question]])
    assert int(method.pick(z_ctx, z_base, none, TABLE, asked)) == ID[" Communist"]
    example = prompt_words(TABLE, [question], [[ID[" Pok"], *question]])
    assert int(method.pick(z_ctx, z_base, none, TABLE, example)) == ID[" Chinese"]


def test_each_row_keeps_its_own_prompt_words_when_rows_leave():
    """Row 0 (its prompt lacks " seat") takes the contrast's " city" and ends; row 1 (whose
    prompt has it) keeps " seat" twice, the second time as the batch's only live row."""
    script = {(): SEAT_CTX, (" seat",): SEAT_CTX}
    base = {(): SEAT_BASE, (" seat",): SEAT_BASE}
    asked = prompt_words(TABLE, [[ID[","]], [ID[" seat"]]])
    method = Method("cad", 1.0, beta=0.3)
    out = decode((ScriptStream(script, 2), ScriptStream(base, 2)),
                 lambda zc, zb, last, rows: method.pick(zc, zb, last, TABLE, asked[rows]), 6,
                 TABLE)
    assert ["".join(VOCAB[t] for t in o) for o in out] == [" city", " seat seat"]
