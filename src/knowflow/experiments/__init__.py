"""Registered experiments: each module registers `run(cfg, out_dir) -> Summary` by name."""

from knowflow.experiments import cpi_toy  # noqa: F401
