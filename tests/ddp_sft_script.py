"""Run by tests/test_sft_distributed.py under torchrun: a tiny SFT run with the tracker."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from helpers import byte_tokenizer, tiny_llama  # noqa: E402
from knowflow.data.instruction_rows import encode_all  # noqa: E402
from knowflow.data.instructions import MixtureConfig, builtin_mixture  # noqa: E402
from knowflow.data.suites import get_suite  # noqa: E402
from knowflow.train.sft import SFTConfig, train_model  # noqa: E402
from knowflow.train.tracker import RelianceTracker, TrackerConfig  # noqa: E402

torch.set_num_threads(1)
out = Path(sys.argv[1])
tok = byte_tokenizer()
data, _ = encode_all(tok, builtin_mixture(MixtureConfig(size=16, seed=1)), "chat", 512)
items = {"cf-capitals": get_suite("cf-capitals", limit=5)}
tracker = RelianceTracker(tok, TrackerConfig(every=2, batch_size=2), out, items=items)
train_model(tiny_llama(tok), tok, data, SFTConfig(steps=4, batch_size=2, save_every=10), out,
         [tracker], ddp_backend="gloo")
rank = torch.distributed.get_rank()
(out / f"rank{rank}.json").write_text(json.dumps(tracker.records))
