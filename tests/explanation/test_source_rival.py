"""The rival the verdict weighs a span against: what the model says after the same lead
without the context (a naive greedy loop), scored by a full forward pass with and without it;
and the source scores of one side, all in one trie call, against full forward passes."""

import pytest
import torch

from helpers import byte_tokenizer
from knowflow.data.suites import get_suite
from knowflow.evaluation.generate import clean_output
from knowflow.evaluation.loglik import score_naive
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import encode, rendered, with_lead
from knowflow.explanation.run import _rival_texts, _source_scores
from knowflow.explanation.source import first_clause


def _greedy(model, tok, ids: list[int], n: int) -> str:
    out = list(ids)
    for _ in range(n):
        with torch.no_grad():
            nxt = int(model(torch.tensor([out])).logits[0, -1].argmax())
        if nxt == tok.eos_token_id:
            break
        out.append(nxt)
    return clean_output(tok.decode(out[len(ids):], skip_special_tokens=True))


def test_rival_is_the_no_context_continuation_of_the_lead(make_tiny_llama):
    tok = byte_tokenizer()
    model = make_tiny_llama(tok, seed=3)
    items = get_suite("cf-capitals", limit=3)
    spans = [("The capital is", " Lyon"), ("", "Paris"), ("It is", " Rome")]
    cfg = ExplainConfig(max_new_tokens=6, batch_size=2)
    led = encode(tok, [with_lead(rendered(it, tok, "chat"), s[0])
                       for it, s in zip(items, spans, strict=True)])
    bare = encode(tok, [with_lead(rendered(it, tok, "chat", ""), s[0])
                        for it, s in zip(items, spans, strict=True)])
    texts = _rival_texts(model, tok, spans, bare, cfg)
    assert texts[1] == ""                                          # no lead: no rival here
    plain = encode(tok, [rendered(it, tok, "chat") for it in items])
    conts = [[" " + s[1]] for s in spans]
    memory = [" Paris", " Oslo", " Rome"]
    got = _source_scores(model, tok, led, plain, conts, memory, texts, cfg)
    checked = 0
    for i in range(3):
        span, mem, rival = got[0][i], got[1][i], got[2][i]
        assert span[0] == pytest.approx(score_naive(model, tok, led[i], conts[i][0])[0],
                                        abs=1e-4)
        assert mem[0] == pytest.approx(score_naive(model, tok, plain[i], memory[i])[0],
                                       abs=1e-4)
        if i == 1:
            assert rival is None
            continue
        text = first_clause(_greedy(model, tok, bare[i], cfg.max_new_tokens))
        assert texts[i] == text
        if not text:
            assert rival is None
            continue
        assert rival == pytest.approx(score_naive(model, tok, led[i], " " + text)[0], abs=1e-4)
        bare_side = _source_scores(model, tok, bare, bare, conts, memory, texts, cfg)
        assert bare_side[2][i] == pytest.approx(score_naive(model, tok, bare[i], " " + text)[0],
                                                abs=1e-4)
        checked += 1
    assert checked                                                 # the seed gives a rival
