"""Garbled answers: a generated output that names a misspelt variant of the context's answer.

Contrastive decoding can push the later tokens of a multi-token name off course ("Benggazi" for
Benghazi, "Syr Reap" for Siem Reap, "Kandeshtar" for Kandahar). An output is **garbled** when it
does not mention the context's answer (`normalize.score_output`) but contains a span whose
character edit distance to one of the answer's alternatives is 1 to 3. Spans are runs of the
output's normalised words one shorter, as long as, or one longer than the alternative (so a
name split or merged differently still counts), joined by single spaces. To keep ordinary
words from counting as variants of short names ("home" for Rome, "is" for Paris), a span must
start with the alternative's first character, and its distance must be below half the
alternative's length; a span that is itself the memorized answer or the subject never counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowflow.evaluation.normalize import Words, words

MAX_DISTANCE = 3


def edit_distance(a: str, b: str, limit: int = MAX_DISTANCE) -> int:
    """Levenshtein distance of `a` and `b`, or `limit + 1` once it must exceed `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, start=1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def garbled(output: str, counterfactual: Sequence[Words], others: Sequence[Words] = (),
            hit: bool = False) -> bool:
    """Whether `output` names a variant at edit distance 1-3 of one of the context answer's
    alternatives `counterfactual` (see the module docstring); `others` (the memorized answer's
    and the subject's alternatives) never count; `hit`: the output names the answer itself."""
    if hit:
        return False
    hay = words(output)
    real = {" ".join(o) for o in others}
    for alt in counterfactual:
        target = " ".join(alt)
        for size in {max(1, len(alt) - 1), len(alt), len(alt) + 1}:
            for i in range(len(hay) - size + 1):
                span = " ".join(hay[i:i + size])
                if span[:1] != target[:1] or span in real:
                    continue
                d = edit_distance(span, target)
                if 1 <= d <= MAX_DISTANCE and 2 * d < len(target):
                    return True
    return False
