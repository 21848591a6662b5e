"""Context-critical filtering for the theory model: an alias of the one curation rule in
`knowflow.curate.criticality` (kept so that existing imports work)."""

from __future__ import annotations

from knowflow.curate import criticality
from knowflow.models.cpi_toy import OneLayerCPI
from knowflow.worlds.cpi_toy import ToyData


def no_context_loss(model: OneLayerCPI, data: ToyData):
    """Per-example loss of the answer given `[s, r]` only. (N,)"""
    return criticality.no_context_loss(model, data)


def drop_lowest_no_context_loss(model: OneLayerCPI, data: ToyData, fraction: float) -> ToyData:
    """Keep all but the `fraction` of examples with the lowest no-context loss."""
    return criticality.drop_lowest_no_context_loss(model, data, fraction)
