"""The shared test builders of tests/helpers.py build what they say, and the
`make_tiny_llama` fixture is the one factory."""

import torch

from helpers import SHARP, byte_bpe, byte_tokenizer, tiny_llama


def test_byte_bpe_round_trips():
    tok = byte_bpe()
    assert tok.decode(tok("The capital of France")["input_ids"]) == "The capital of France"
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)


def test_the_fixture_is_the_factory(make_tiny_llama):
    assert make_tiny_llama is tiny_llama


def test_default_llama_follows_its_tokenizer(make_tiny_llama):
    tok = byte_tokenizer()
    cfg = make_tiny_llama(tok).config
    assert cfg.vocab_size == len(tok) and cfg.eos_token_id == cfg.pad_token_id == \
        tok.eos_token_id
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (2, 64, 4)


def test_same_seed_same_weights_and_sharp_scales_the_matrices(make_tiny_llama):
    tok = byte_bpe()
    a, b = make_tiny_llama(tok, seed=1), make_tiny_llama(tok, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.lm_head.weight, make_tiny_llama(tok, seed=2).lm_head.weight)
    sharp = make_tiny_llama(tok, layers=4, **SHARP)
    plain = make_tiny_llama(tok, layers=4, **(SHARP | {"weight_scale": 1.0}))
    assert sharp.config.hidden_size == 32 and sharp.config._attn_implementation == "sdpa"
    torch.testing.assert_close(sharp.lm_head.weight, 4.0 * plain.lm_head.weight)
    assert sharp.config.bos_token_id == tok.bos_token_id == 0
