"""The `heads` decoding method: steer attention heads while the model answers.

A handful of heads decide between the context's answer and the memorized one. Scaling one
context head's output moved GPT-2-scale models to the in-context answer (Yu, Merullo, Pavlick
2023); pruning the heads that favour memory steers the choice too (PH3, Jin et al. 2024). The
method multiplies the outputs of chosen heads, at every position, by gamma: gamma > 1 amplifies
context heads, gamma 0 prunes memory heads (`lens.heads.scaled_heads`).

A method spec names its heads: `heads:L.H+L.H xGAMMA`, e.g. `heads:24.3+27.1x2` (scale two
heads by 2) or `heads:10.4x0` (prune one); `heads:x1` steers nothing (greedy). A bare `heads`
asks `knowflow.evaluate` to choose them: `evaluation.heads_calibration` ranks the heads and picks
k and gamma on a calibration split of the items, and every method is then scored on the
held-out items only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch

from knowflow.errors import ConfigError
from knowflow.lens.heads import head_shape, scaled_heads

NAME = "heads"
_SPEC = re.compile(r"((?:\d+\.\d+)(?:\+\d+\.\d+)*)?x([0-9.eE+-]+)")


@dataclass(frozen=True)
class HeadSteering:
    """Multiply the outputs of `heads` ((layer, head), ...) by `gamma`."""

    heads: tuple[tuple[int, int], ...] = ()
    gamma: float = 1.0

    @property
    def spec(self) -> str:
        return "+".join(f"{layer}.{head}" for layer, head in self.heads) + f"x{self.gamma:g}"

    @classmethod
    def parse(cls, spec: str) -> HeadSteering:
        """`L.H+L.HxGAMMA` (the part after `heads:`)."""
        m = _SPEC.fullmatch(spec.replace(" ", ""))
        gamma = float(m.group(2)) if m else math.nan
        if m is None or not math.isfinite(gamma) or gamma < 0:
            raise ConfigError(f"bad heads spec {spec!r}", "method",
                              "write heads:LAYER.HEAD+LAYER.HEADxGAMMA (gamma >= 0), e.g. "
                              "heads:24.3+27.1x2, or a bare `heads` to calibrate them")
        heads = tuple(tuple(int(x) for x in h.split(".")) for h in (m.group(1) or "").split("+")
                      if h)
        return cls(heads, gamma)


def parse_spec(name: str) -> HeadSteering | None:
    """The steering of a method name `heads` (None: to be calibrated) or `heads:SPEC`."""
    return None if name == NAME else HeadSteering.parse(name.removeprefix(f"{NAME}:"))


@contextmanager
def steered(model, steering: HeadSteering | None) -> Iterator[None]:
    """Inside the block the model runs with `steering`'s heads scaled (unchanged for none or
    for no heads; gamma 1 multiplies by one, which changes no bit)."""
    if steering is None or not steering.heads:
        with nullcontext():
            yield
        return
    n_layers, n_heads, _ = head_shape(model)
    scales: dict[int, torch.Tensor] = {}
    for layer, head in steering.heads:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ConfigError(f"head {layer}.{head} is outside the model ({n_layers} layers "
                              f"of {n_heads} heads)", "method")
        scales.setdefault(layer, torch.ones(n_heads))[head] = steering.gamma
    with scaled_heads(model, scales):
        yield
