"""The answer span explain weighs without --answer (`explanation.target`), and per-token
attribution of the whole generation (`--levels tokens`)."""

import pytest
import torch

import knowflow
from knowflow.data.facts import ConflictItem
from knowflow.explanation.attribution import ablation_masks, score_masks
from knowflow.explanation.options import ExplainConfig
from knowflow.explanation.splitter import split_sentences
from knowflow.explanation.target import explained_span, generated_span
from knowflow.explanation.tokens import token_prefixes

# (question, generation, lead, span) -- the rule's table
TABLE = [
    ("In which city is the Eiffel Tower?",
     "The Eiffel Tower is located in Paris, France, which is a city that",
     "The Eiffel Tower is located in", " Paris"),
    ("In which city is the Eiffel Tower?", "The Eiffel Tower is located in Rome.",
     "The Eiffel Tower is located in", " Rome"),
    ("What is the capital of India?", "The capital of India is Mumbai.",
     "The capital of India is", " Mumbai"),
    ("What is the capital of India?", "Mumbai is the capital of India.", "", "Mumbai"),
    ("Who painted the Mona Lisa?", "The Mona Lisa was painted by Leonardo da Vinci in 1503.",
     "The Mona Lisa was painted by", " Leonardo da Vinci"),
    ("Where is the Statue of Liberty?", "The Statue of Liberty is in New York City, USA.",
     "The Statue of Liberty is in", " New York City"),
    ("When was the tower completed?", "It was completed in 1889 for the World's Fair.",
     "It was completed in", " 1889"),
    ("What does Vor Kelim do?", "Vor Kelim works as a baker and lives in Rome.",
     "Vor Kelim works as a", " baker"),
    ("Where is it?", "Rome", "", "Rome"),
    # only restates the question: weighed whole
    ("What is the capital of Seychelles?", "Seychelles is the capital of the Seychelles.",
     "", "Seychelles is the capital of the Seychelles."),
]


@pytest.mark.parametrize("question, generation, lead, span", TABLE)
def test_the_span_rule_on_a_table_of_generations(question, generation, lead, span):
    assert generated_span(question, generation) == (lead, span)
    if lead:   # the lead and the span rebuild the start of the generation
        assert generation.startswith(lead + span)


def _item(cf="", par=""):
    return ConflictItem(id="i", suite="explain", context="Paris is in France. Rome is nice.",
                        question="In which city is the Eiffel Tower?",
                        counterfactual_answer=cf, parametric_answer=par)


def test_a_labelled_answer_wins_over_the_rule_and_the_rule_over_the_whole():
    said = "The Eiffel Tower is located in Paris, France."
    assert explained_span(_item("Rome", "France"), said) == \
        ("The Eiffel Tower is located in Paris,", " France", "labelled")
    assert explained_span(_item(), said) == ("The Eiffel Tower is located in", " Paris",
                                             "lead-in")
    assert explained_span(_item(), "The Eiffel Tower.")[2] == "whole"


def test_token_prefixes_cut_at_each_token(lm):
    _, tok = lm
    prefixes, pieces = token_prefixes(tok, " in Paris.")
    assert "".join(pieces) == " in Paris." and prefixes[-1] == " in Paris."
    assert all(p.endswith(q) for p, q in zip(prefixes, pieces, strict=True))


def test_per_token_scores_add_up_to_the_whole_continuation(lm):
    """The prefixes' scores under each mask: the last prefix's is the whole continuation's,
    so the per-token differences the surrogates are fitted on sum to it."""
    model, tok = lm
    item = _item()
    sents = split_sentences(item.context)
    cfg = ExplainConfig(ablations=8, score_chunk=3, prompt_format="chat")
    masks, _ = ablation_masks(len(sents), cfg, "k")
    prefixes, _ = token_prefixes(tok, " in Rome")
    many = score_masks(model, tok, item, sents, masks, prefixes, cfg)     # (8, tokens)
    whole = score_masks(model, tok, item, sents, masks, " in Rome", cfg)  # (8,)
    assert many.shape == (8, len(prefixes))
    assert torch.allclose(many[:, -1], whole, atol=1e-4)
    assert bool((torch.diff(many, dim=1) < 0).all())     # each token lowers the log-prob


def test_levels_tokens_attributes_every_generated_token(lm):
    model, tok = lm
    res = knowflow.explain(model, "Paris is in France. The sky is blue. Rome is in Italy.",
                           "Where is Rome?", tokenizer=tok, ablations=8, holdout=0,
                           max_new_tokens=4, levels=("source", "sentences", "tokens"))
    (rec,) = res.records
    assert "".join(t["token"] for t in rec["tokens"]).strip() == rec["answer"].strip()
    assert all(len(t["attribution"]) == 3 for t in rec["tokens"])
    assert rec["span_rule"] in ("lead-in", "whole", "labelled")


def test_progress_is_reported_from_the_model_load_on(tiny_model_dir):
    """The library reports every stage through the callback, the load first, so the CLI's
    progress line appears before any slow work."""
    heard = []
    knowflow.explain(str(tiny_model_dir), "Paris is in France. Rome is in Italy.",
                     "Where is Rome?", ablations=8, holdout=0, max_new_tokens=2,
                     levels=("source", "sentences"), device="cpu",
                     progress=lambda done, total, stage: heard.append((stage, done, total)))
    stages = list(dict.fromkeys(s for s, _, _ in heard))
    assert heard[0] == ("load model", 0, 1)
    assert stages[:4] == ["load model", "generate with context", "generate without context",
                          "score answers"]
    assert "ablations" in stages and heard[-1][0] == "explain"
