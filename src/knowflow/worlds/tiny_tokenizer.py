"""A word-level tokenizer for a tiny world: one id per word, split on whitespace.

It is a `tokenizers` WordLevel model wrapped in `PreTrainedTokenizerFast`, so it is saved with
`save_pretrained` next to the model and loads back with `AutoTokenizer.from_pretrained`.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowflow.worlds.tiny_world import BOS, EOS, PAD, UNK


def build_tokenizer(vocab: Sequence[str]):
    """A PreTrainedTokenizerFast whose ids are the positions of `vocab` (no duplicates)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    if len(set(vocab)) != len(vocab):
        raise ValueError("duplicate words in the vocabulary")
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token=UNK))
    core.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, unk_token=UNK)


def encode_words(tokenizer, words: Sequence[str]) -> list[int]:
    """Ids of pre-split words (no special tokens added; <bos> is part of the words)."""
    return tokenizer.convert_tokens_to_ids(list(words))
