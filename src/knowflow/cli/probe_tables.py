"""The tables `knowflow probe <kind>` prints, one function per probe, from its Result and the
config it ran with."""

from __future__ import annotations

from rich.table import Table

from knowflow.cli.common import console


def curves(title: str):
    """The knockout and sublayer table: where removing each source hurts most, then the mean
    change per layer."""

    def show(result, cfg) -> None:
        summary = result.summary
        table = Table(title=title)
        table.add_column("source")
        for name in ("most negative layer", "mean change there", "examples"):
            table.add_column(name, justify="right")
        for name, row in summary.items():
            value = row["most_negative_value"]
            table.add_row(name, str(row["most_negative_layer"]),
                          "" if value is None else f"{100 * value:+.1f}%",
                          str(row["n_examples"]))
        console.print(table)
        layers = max((len(r["mean_rel_change"]) for r in summary.values()), default=0)
        by_layer = Table(title="mean % change in the prediction's probability, by layer")
        by_layer.add_column("layer", justify="right")
        for name in summary:
            by_layer.add_column(name, justify="right")
        for layer in range(layers):
            cells = [summary[n]["mean_rel_change"][layer] for n in summary]
            by_layer.add_row(str(layer),
                             *["" if c is None else f"{100 * c:+.1f}" for c in cells])
        console.print(by_layer)

    return show


def _cell(v) -> str:
    return "" if v is None else f"{v:.2f}"


def projection(result, cfg) -> None:
    summary = result.summary
    table = Table(title=f"vocabulary projection ({summary['n_examples']} examples): share "
                        "of examples whose top token is the prediction")
    for name in ("layer", "attn out", "mlp out", "residual", "attr rate (last subj)",
                 "attr rate (last)"):
        table.add_column(name, justify="right")
    rates, attrs = summary["extraction_rate"], summary["attributes_rate"]
    for layer in range(len(rates["attn"])):
        table.add_row(str(layer), _cell(rates["attn"][layer]), _cell(rates["mlp"][layer]),
                      _cell(rates["hidden"][layer]), _cell(attrs["last_subject"][layer]),
                      _cell(attrs["last"][layer]))
    console.print(table)


def attention(result, cfg) -> None:
    summary = result.summary
    table = Table(title=f"attention mass on the context ({summary['n_examples']} examples)")
    table.add_column("layer", justify="right")
    table.add_column("mean over heads", justify="right")
    table.add_column("max head", justify="right")
    for layer, row in enumerate(summary["mean_mass"]):
        best = max(range(len(row)), key=row.__getitem__)
        table.add_row(str(layer), f"{sum(row) / len(row):.3f}", f"{best}: {row[best]:.3f}")
    console.print(table)


def _heads_table(title: str, cells: list[dict]) -> None:
    table = Table(title=title)
    for name in ("rank", "layer", "head", "effect", "95% interval"):
        table.add_column(name, justify="right")
    for rank, c in enumerate(cells, start=1):
        table.add_row(str(rank), str(c["layer"]), str(c["head"]), f"{c['effect']:+.3f}",
                      f"[{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]")
    console.print(table)


def heads(result, cfg) -> None:
    from knowflow.data.prompts import format_note

    summary = result.summary
    _heads_table(f"context heads ({summary['n_examples']} items; removing them lowers log "
                 f"p(cf) - log p(par); {cfg.rank_by} ablation)", summary["context_heads"])
    _heads_table("memory heads (removing them raises it)", summary["memory_heads"])
    half = summary.get("half_effect_heads", {})
    console.print(f"heads carrying half of the total effect: context {half.get('context')}, "
                  f"memory {half.get('memory')}", highlight=False)
    used = result.config["config"]["prompt_format"]
    console.print(format_note(cfg.prompt_format, used), highlight=False)


def head_projection(result, cfg) -> None:
    summary = result.summary
    table = Table(title=f"head extraction rate ({summary['n_examples']} facts): best heads vs "
                        "the whole attention sublayer of their layer")
    for name in ("layer", "head", "head rate", "sublayer rate"):
        table.add_column(name, justify="right")
    for c in summary["best_heads"]:
        table.add_row(str(c["layer"]), str(c["head"]), f"{c['rate']:.2f}",
                      f"{summary['attn_rate'][c['layer']]:.2f}")
    console.print(table)
    peak = summary.get("peak_attn_extraction")
    if peak:
        console.print(f"whole-sublayer peak: layer {peak['layer']}, {peak['rate']:.2f}",
                      highlight=False)
