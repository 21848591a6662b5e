"""`knowflow probe <kind>`: the mechanistic probes of the probe registry, one command each.

Every probe command is built the same way from `knowflow.probes.PROBES`: its options are
those of the model (`ModelOptions`), its examples (`PromptData`; conflict items,
`ItemData`, for the heads probe), the probe's own config class, where the run goes
(`OutOptions`) and `--threads`. It calls `knowflow.probe` (the examples and the model loaded,
the probe run with a progress bar, `runs/probe-<kind>/<timestamp>/` written with
config.json, records.jsonl, summary.json, figures/ and report.html) and prints the probe's
table (`probe_tables`). Bad input is one line, exit code 2.
"""

from __future__ import annotations

from collections.abc import Callable

from knowflow.cli import probe_tables
from knowflow.cli.common import print_paths
from knowflow.cli.flags import SET_HELP, Command
from knowflow.cli.progress import Bars

HELP = ("Mechanistic probes: attention knockout, sublayer knockout, vocabulary projection, "
        "attention mass on the context, context and memory heads.")

# kind (a key of knowflow.probes.PROBES) -> (the command's help, its table)
VIEWS: dict[str, tuple[str, Callable]] = {
    "knockout": ("""Attention-edge knockout from the last position, swept over layers.

    Cuts the attention edges from the last position to each source set in a window of layers
    and reports the relative change in the probability of the model's own prediction.""",
                 probe_tables.curves("attention knockout: where blocking hurts most")),
    "sublayer": ("""Sublayer knockout: zero MLP or attention outputs, swept over layers.

    Zeroes the outputs at chosen positions in a window of layers and reports the relative
    change in the probability of the model's own prediction.""",
                 probe_tables.curves("sublayer knockout: where zeroing hurts most")),
    "project": ("""Vocabulary projection: attribute extraction rate and attributes rate per layer.

    Extraction rate: how often the top token of the attention (MLP) output at the last
    position is the final prediction. Attributes rate: the share of the top-k tokens of the
    residual stream at the last subject token that belong to the subject's attributes.""",
                probe_tables.projection),
    "attention": ("""Attention mass on the context, per layer and head.

    The share of attention from the answer position (the last prompt token) to the context's
    tokens; examples need a `context` (--data) or come from a suite (--suite).""",
                  probe_tables.attention),
    "heads": ("""Context heads and memory heads: each head's causal effect on the context's answer.

    For every (layer, head), the change in log p(cf) - log p(parametric) at the answer position
    when the head's output is zeroed, replaced by its mean, or its attention to the context is
    blocked; 95% bootstrap intervals over items.""", probe_tables.heads),
    "head-project": ("""Vocabulary projection of each attention head: head-level extraction.

    Per head, the share of known facts whose top projected token (the head's output at the
    last position through its slice of o_proj, the final norm and the unembedding) is the
    model's prediction, next to the whole attention sublayer's share.""",
                     probe_tables.head_projection),
}


def probe_command(kind: str) -> Command:
    """The command of probe `kind`: its options, its run through `knowflow.probe`, its
    table."""
    doc, show = VIEWS[kind]

    def sections() -> dict[str, type]:
        from knowflow.data.options import ItemData, PromptData
        from knowflow.lens.device import Threads
        from knowflow.lens.hub import ModelOptions
        from knowflow.probes import ON_CONFLICT_ITEMS, PROBES
        from knowflow.store.run_folder import OutOptions

        return {"model": ModelOptions,
                "data": ItemData if kind in ON_CONFLICT_ITEMS else PromptData,
                "cfg": PROBES[kind][1], "run": OutOptions, "threads": Threads}

    def probe_cmd(model, data, cfg, run, threads) -> None:
        from knowflow.api import probe

        threads.apply()
        with Bars(f"probe {kind}") as progress:
            result = probe(model.model, data.source, kind=kind, config=cfg, limit=data.limit,
                           out=run.out, runs_dir=run.runs_dir, progress=progress,
                           **model.load_keywords)
        show(result, cfg)
        print_paths(result.out_dir, result.out_dir / "report.html")

    probe_cmd.__doc__ = doc
    return Command(probe_cmd, sections, job="cfg", sets=SET_HELP)
