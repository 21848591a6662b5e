"""The guard's passage rule: the contrast may put a word of its own choosing only
where it starts a word of the passage the way the tokenizer starts it, and never a bare
space. Reproduced on a toy vocabulary with a longest-match tokenizer, the two held-out
failures of SmolLM2-135M-Instruct the rule was written for."""

from __future__ import annotations

import math

import pytest
import torch

from knowflow.evaluation.decoding import Method
from knowflow.evaluation.generate import token_table
from knowflow.evaluation.guard import passage_starts

VOCAB = ["<eos>", ".", " ", "B", "otswana", "F", "Franc", " Franc", "ist", "own", "ant",
         " capital", " is", " of", "The", " song", " answer", " sang", " Anne", " F", "?",
         " What", " the", "Botswana", " Botswana", "'s", " was"]
ID = {t: i for i, t in enumerate(VOCAB)}
TABLE = token_table(VOCAB, [0])
NONE = torch.tensor([-1])
METHODS = [Method("cad", 1.0, beta=0.3), Method("adacad", beta=0.3), Method("coiecd"),
           Method("cocoa", beta=0.3)]


class Tokenizer:
    """Longest-match tokenization over VOCAB: "Francistown" is "Franc|ist|own", never
    "F|..." (as SmolLM2's tokenizer starts it)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        out, i = [], 0
        while i < len(text):
            piece = max((t for t in VOCAB[1:] if text.startswith(t, i)), key=len, default=None)
            if piece is None:
                i += 1  # a character the toy vocabulary lacks
                continue
            out.append(ID[piece])
            i += len(piece)
        return out

    def decode(self, ids) -> str:
        return "".join(VOCAB[i] for i in ids)


TOK = Tokenizer()
# The distributions below are sharper than SmolLM2's (quoted in each docstring) so that the
# toy vocabulary's other tokens, which share the rest evenly, stay below the named ones.
QUESTION = TOK.encode(" What is the capital of Botswana?")


def _logits(probs: dict) -> torch.Tensor:
    """(1, vocab) log-probabilities: the named tokens, the rest shared evenly."""
    rest = (1.0 - sum(probs.values())) / (len(VOCAB) - len(probs))
    return torch.tensor([[math.log(probs.get(t, rest)) for t in VOCAB]])


def _starts(passage: str, question=QUESTION) -> torch.Tensor:
    return passage_starts(TOK, [TOK.encode(passage) + question], [question], len(VOCAB))


def test_passage_starts_are_the_tokenizers_first_pieces_of_the_passage_words():
    starts = _starts(" As the capital of Botswana, Francistown is home to the government.")
    named = {VOCAB[i] for i in starts[0].nonzero()[:, 0].tolist()}
    assert {"Franc", " Franc", "Botswana", " Botswana"} <= named   # either spacing
    assert "F" not in named and " F" not in named                  # a shorter split is not
    # a word both prompts hold as often (the question's) is not the passage's
    assert " What" not in named


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.label)
def test_the_contrast_does_not_start_a_name_with_a_split_the_model_cannot_spell(method):
    """Asked for Botswana's capital over a passage naming Francistown, SmolLM2 starts with
    "B" (0.24; the no-context model 0.86) or "F" (0.11; 0.001). The contrast picks "F", the
    context name's first letter, but the tokenizer starts "Francistown" with "Franc", so
    after "F" the with-context model, which spells the rest, has no name to continue and
    wrote "Fantekwel". "F" starts no passage word, so the step is the model's; a plausible
    "Franc" stays the contrast's to pick."""
    z_ctx, z_base = _logits({"B": 0.45, "F": 0.4}), _logits({"B": 0.97, "F": 0.001})
    starts = _starts(" As the capital of Botswana, Francistown is home to the government.")
    assert int(method.pick(z_ctx, z_base, NONE, TABLE)) == ID["F"]   # the guard before
    assert int(method.pick(z_ctx, z_base, NONE, TABLE, None, starts)) == ID["B"]
    z_ctx, z_base = _logits({"B": 0.45, "Franc": 0.4}), _logits({"B": 0.97, "Franc": 0.001})
    assert int(method.pick(z_ctx, z_base, NONE, TABLE, None, starts)) == ID["Franc"]


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.label)
def test_the_contrast_does_not_swerve_the_lead_in_to_a_word_the_passage_lacks(method):
    """Asked who sang "Happy Birthday, Mr. President" over a passage that says Anne Frank
    did, SmolLM2 says 'The song "Happy Birthday, Mr. President" was sung by Anne Frank.'.
    After "The", the no-context model is surer of " song" (0.31 against 0.06) than of
    " answer" (0.04 against 0.055), so the contrast picked " answer" and the answer became
    'The answer is: "John F. Kennedy"' (cut off). Neither word is the passage's: the
    contrast's preference between them is no evidence from the context, so the model's
    " song" is kept; a passage word (" sang") stays the contrast's to pick."""
    z_ctx, z_base = _logits({" song": 0.45, " answer": 0.4}), \
        _logits({" song": 0.97, " answer": 0.001})
    question = TOK.encode(" the song?")
    starts = _starts(" Anne Frank sang the song.", question)
    assert int(method.pick(z_ctx, z_base, NONE, TABLE)) == ID[" answer"]     # the guard before
    assert int(method.pick(z_ctx, z_base, NONE, TABLE, None, starts)) == ID[" song"]
    z_ctx, z_base = _logits({" song": 0.45, " sang": 0.4}), \
        _logits({" song": 0.97, " sang": 0.001})
    assert int(method.pick(z_ctx, z_base, NONE, TABLE, None, starts)) == ID[" sang"]


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.label)
def test_a_bare_space_is_never_the_contrasts(method):
    """A whitespace-only token splits the next word where the tokenizer never does (" " then
    "1" for " 1"); on SmolLM2 the contrast picked one after "The" and the answer became
    "The 1980s.". It is form, like punctuation: the model's call."""
    z_ctx, z_base = _logits({" song": 0.45, " ": 0.4}), _logits({" song": 0.97, " ": 0.001})
    assert int(method.next_logits(z_ctx, z_base).argmax()) == ID[" "]
    assert int(method.pick(z_ctx, z_base, NONE, TABLE)) == ID[" song"]
