"""The rival the verdict weighs a span against: what the model says after the same lead
without the context (a naive greedy loop), scored by a full forward pass with and without it."""

import pytest
import torch

from helpers import byte_tokenizer
from knowflow.data.suites import get_suite
from knowflow.evaluation.generate import clean_output
from knowflow.evaluation.loglik import score_naive
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.prompts import encode, rendered, with_lead
from knowflow.explanation.run import _rivals
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
    got = _rivals(model, tok, spans, led, bare, cfg)
    assert got[1] is None                                          # no lead: no rival here
    checked = 0
    for i in (0, 2):
        text = first_clause(_greedy(model, tok, bare[i], cfg.max_new_tokens))
        if not text:
            assert got[i] is None
            continue
        rival, lp_ctx, lp_bare = got[i]
        assert rival == text
        assert lp_ctx == pytest.approx(score_naive(model, tok, led[i], " " + text)[0], abs=1e-4)
        assert lp_bare == pytest.approx(score_naive(model, tok, bare[i], " " + text)[0],
                                        abs=1e-4)
        checked += 1
    assert checked                                                 # the seed gives a rival
