"""Registered experiments: each module registers `run(cfg, out_dir) -> Summary` by name."""

import knowflow.experiments.inversion_injected  # noqa: F401
import knowflow.experiments.inversion_smollm2  # noqa: F401
import knowflow.experiments.inversion_tiny  # noqa: F401
import knowflow.experiments.inversion_tiny_heads  # noqa: F401
import knowflow.experiments.ocr_smollm2  # noqa: F401
import knowflow.experiments.ocr_toy  # noqa: F401
import knowflow.experiments.sft  # noqa: F401
from knowflow.experiments import cpi_toy  # noqa: F401
