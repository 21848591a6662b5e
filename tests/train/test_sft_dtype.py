"""`knowflow sft --dtype`: a bad value is one line and exit code 2 with nothing written; "auto"
trains float32 weights (the Trainer adds bf16 autocast on a GPU), other values pass through."""

import pytest
from typer.testing import CliRunner

from knowflow.cli import app
from knowflow.errors import ConfigError
from knowflow.train import sft_job
from knowflow.train.sft_job import SFTJobConfig

runner = CliRunner()


def test_sft_bad_dtype_is_one_line(tmp_path, tiny_model_dir):
    res = runner.invoke(app, ["sft", "--model", str(tiny_model_dir), "--dtype", "float8",
                              "--runs-dir", str(tmp_path)])
    assert res.exit_code == 2 and "dtype" in res.output and "float8" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("*.json*"))


@pytest.mark.parametrize("given,loaded", [("auto", "float32"), ("bfloat16", "bfloat16")])
def test_sft_job_dtype_reaches_the_model_load(monkeypatch, tmp_path, given, loaded):
    seen = {}

    class Stop(Exception):
        pass

    def fake_load(model, tokenizer=None, *, device, dtype, source=None):
        seen["dtype"] = dtype
        raise Stop

    monkeypatch.setattr(sft_job, "resolve_model", fake_load)
    with pytest.raises(Stop):
        sft_job.run_sft_job(SFTJobConfig(dtype=given), tmp_path)
    assert seen["dtype"] == loaded
    with pytest.raises(ConfigError):
        SFTJobConfig(dtype="half").validate()
