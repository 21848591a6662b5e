"""Prefill in length groups: the split is the cheapest, and the joined cache continues every
row exactly as one left-padded pass over all rows would (tiny random Llama, byte tokenizer)."""

import itertools
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from knowflow.lens import prompt_batches as batching
from knowflow.lens.prefix import Prefix, forward
from knowflow.lens.prompt_batches import length_groups, prefill


def _cost(lengths, groups, pass_cost):
    return sum(len(g) * max(lengths[i] for i in g) + pass_cost for g in groups)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=7), st.integers(0, 60))
def test_length_groups_is_the_cheapest_split_of_the_sorted_rows(lengths, pass_cost):
    groups = length_groups(lengths, pass_cost)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    flat = [i for g in groups for i in g]
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = min(_cost(lengths, [order[a:b] for a, b in itertools.pairwise((0, *cuts, len(order)))],
                     pass_cost)
               for k in range(len(order))
               for cuts in itertools.combinations(range(1, len(order)), k))
    assert _cost(lengths, groups, pass_cost) == best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 5)), min_size=1, max_size=7),
       st.integers(0, 60), st.integers(1, 8))
def test_length_groups_with_a_limit_is_the_cheapest_split_within_it(rows, pass_cost, limit):
    """Rows carrying several items (`sizes`): no group holds more than `limit` items unless
    it is one row, and no such split of the sorted rows costs less."""
    lengths, sizes = [n for n, _ in rows], [k for _, k in rows]
    groups = length_groups(lengths, pass_cost, sizes, limit)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(len(g) == 1 or sum(sizes[i] for i in g) <= limit for g in groups)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    splits = ([order[a:b] for a, b in itertools.pairwise((0, *cuts, len(order)))]
              for k in range(len(order))
              for cuts in itertools.combinations(range(1, len(order)), k))
    best = min(_cost(lengths, split, pass_cost) for split in splits
               if all(len(g) == 1 or sum(sizes[i] for i in g) <= limit for g in split))
    assert _cost(lengths, groups, pass_cost) == best


def test_length_groups_extremes():
    lengths = [5, 30, 6, 29, 31]
    assert length_groups(lengths, 10 ** 6) == [[4, 1, 3, 2, 0]]       # one pass
    assert length_groups(lengths, 0) == [[4], [1], [3], [2], [0]]     # no padding at all
    assert length_groups(lengths, 8) == [[4, 1, 3], [2, 0]]


def _prompts(shared: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    head = [rng.randrange(3, 200) for _ in range(shared)]
    lengths = [3, 40, 4, 38, 21, 2, 39]                       # three length groups
    return [head + [rng.randrange(3, 200) for _ in range(n)] for n in lengths]


def _continue(model, cache, mask, pos, token):
    """Logits of one more step after `token` (rows, vocab)."""
    mask = torch.cat([mask, mask.new_ones(len(token), 1)], dim=1)
    logits, _ = forward(model, past=cache, last_only=True, input_ids=token[:, None],
                        attention_mask=mask, position_ids=pos)
    return logits[:, -1]


@pytest.mark.parametrize("shared", [0, 5])
def test_grouped_prefill_continues_like_one_pass(tiny_lm, tok, monkeypatch, shared):
    model, tokenizer = tiny_lm, tok
    seqs = _prompts(shared)
    prefix = Prefix.build(model, seqs)
    assert prefix.length == shared
    assert len(length_groups([len(s) - shared for s in seqs], batching.PASS_COST)) > 1
    grouped = prefill(model, seqs, prefix, tokenizer.pad_token_id)
    monkeypatch.setattr(batching, "PASS_COST", 10 ** 6)      # one left-padded pass
    whole = prefill(model, seqs, prefix, tokenizer.pad_token_id)
    torch.testing.assert_close(grouped[0], whole[0], atol=1e-5, rtol=1e-5)
    assert torch.equal(grouped[3], whole[3])                   # next positions
    assert grouped[2].shape == whole[2].shape                  # one width for all rows
    assert torch.equal(grouped[2].sum(1), whole[2].sum(1))     # each row's real tokens
    token = whole[0].argmax(-1)
    after_grouped = _continue(model, grouped[1], grouped[2], grouped[3], token)
    after_whole = _continue(model, whole[1], whole[2], whole[3], token)
    torch.testing.assert_close(after_grouped, after_whole, atol=1e-5, rtol=1e-5)
    for i, seq in enumerate(seqs):                             # and like each row alone
        alone = model(torch.tensor([seq + [int(token[i])]])).logits[0, -1]
        torch.testing.assert_close(after_grouped[i], alone, atol=1e-4, rtol=1e-4)


def test_prefill_with_extra_kwargs_runs_one_pass(tiny_lm, tok, monkeypatch):
    model, tokenizer = tiny_lm, tok
    seqs = _prompts(0)
    calls = []
    real = batching.forward

    def counting(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(batching, "forward", counting)
    prefill(model, seqs, Prefix(0), tokenizer.pad_token_id, extra=lambda mask: {})
    assert calls == [(len(seqs), 40)]
    calls.clear()
    prefill(model, seqs, Prefix(0), tokenizer.pad_token_id)
    assert len(calls) > 1 and sum(c[0] for c in calls) == len(seqs)


def test_fit_batch_size_on_cuda_follows_free_memory(tiny_lm, monkeypatch):
    """The CUDA branch, on a CPU: the device and the free-memory probe are faked, so the
    arithmetic is checked without a GPU (batch ~ free memory / per-row bytes, 1..cap)."""
    cfg = tiny_lm.config
    free = {"bytes": 0}
    monkeypatch.setattr(batching, "model_device", lambda model: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev: (free["bytes"], 2 ** 40))
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    tokens, nbytes = 60 + 8, 4                                  # float32 weights
    per_row = (2 * cfg.num_hidden_layers * kv_heads * head_dim * tokens * nbytes
               + tokens * (4 * cfg.hidden_size + 2 * cfg.intermediate_size + heads * tokens)
               * nbytes + cfg.vocab_size * 4 * 9)
    free["bytes"] = 100 * per_row
    assert batching.fit_batch_size(tiny_lm, 60, 8, share=0.5) == 50
    free["bytes"] = 200 * per_row
    assert batching.fit_batch_size(tiny_lm, 60, 8, share=0.5) == 100
    assert batching.fit_batch_size(tiny_lm, 60, 8, share=0.5, cap=64) == 64
    assert batching.fit_batch_size(tiny_lm, 120, 8, share=0.5) < 100   # longer prompts
    free["bytes"] = per_row // 10                                       # nothing fits
    assert batching.fit_batch_size(tiny_lm, 60, 8) == 1
