"""explain's item selection: --offset skips the first items of the seeded order."""

import pytest

from knowflow.errors import ConfigError
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.run import load_explain_items


def _ids(**kw):
    cfg = ExplainConfig(levels=("source",), **kw)
    return [it.id for it in load_explain_items("cf-capitals", None, cfg)]


def test_offset_takes_the_next_items_of_the_same_seeded_order():
    first, both = _ids(limit=20), _ids(limit=50)
    held_out = _ids(limit=30, offset=20)
    assert sorted(held_out) == sorted(set(both) - set(first))
    assert held_out == [i for i in both if i not in first]        # the suite's order kept
    assert _ids(limit=20, offset=0) == first
    assert len(_ids(offset=180)) == len(_ids()) - 180             # no limit: all the rest


def test_offset_past_the_end_is_refused():
    with pytest.raises(ConfigError, match="offset"):
        _ids(limit=5, offset=500)
    with pytest.raises(ConfigError, match="offset"):
        ExplainConfig(offset=-1).validate()
