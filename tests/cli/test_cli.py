"""The `knowflow` command: listing, configs, bad input (exit 2, one line, nothing written)."""

from typer.testing import CliRunner

from knowflow.cli import app

runner = CliRunner()


def test_list_shows_registered_experiments():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    assert "cpi-toy" in result.output


def test_list_shows_the_suites_and_the_benchmarks_by_name():
    from knowflow.data.benchmarks import list_benchmarks
    from knowflow.data.suites import list_suites

    out = runner.invoke(app, ["list"], terminal_width=200).output
    assert all(name in out for name in list_suites())
    for row in list_benchmarks():
        assert row["name"] in out and row["preset"] in out
        assert (row["hub"] or "files")[:40] in out


def test_config_lists_every_settable_key():
    result = runner.invoke(app, ["config", "cpi-toy"])
    assert result.exit_code == 0
    assert "finetune.lr=" in result.output and "world.delta_c=" in result.output


def _assert_clean_failure(result, tmp_path, *needles):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for needle in needles:
        assert needle in lines[0]
    assert not (tmp_path / "cpi-toy").exists()  # nothing half-written


def test_unknown_set_key_is_one_line_exit_2(tmp_path):
    result = runner.invoke(app, ["run", "cpi-toy", "--runs-dir", str(tmp_path),
                                 "--set", "finetune.nope=1"])
    _assert_clean_failure(result, tmp_path, "finetune.nope", "unknown key")


def test_impossible_values_are_one_line_exit_2(tmp_path):
    for override, field in (("world.delta_c=1.5", "world.delta_c"),
                            ("mixture.n_cs=-3", "mixture.n_cs"),
                            ("world.n_test=0", "world.n_test")):
        result = runner.invoke(app, ["run", "cpi-toy", "--runs-dir", str(tmp_path),
                                     "--set", override])
        _assert_clean_failure(result, tmp_path, field)
    result = runner.invoke(app, ["run", "cpi-toy", "--runs-dir", str(tmp_path), "--set",
                                 "mixture.n_c=0", "--set", "mixture.n_cs=0"])
    _assert_clean_failure(result, tmp_path, "empty")


def test_unknown_experiment_and_bad_report_dir(tmp_path):
    result = runner.invoke(app, ["run", "no-such-thing", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "unknown experiment" in result.output
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not a knowflow run directory" in result.output


def test_run_then_report_over_two_runs(tmp_path):
    args = ["run", "cpi-toy", "--runs-dir", str(tmp_path), "--set", "parts=inversion",
            "--set", "finetune.steps=5", "--set", "world.n_test=5", "--set", "workers=1"]
    first = runner.invoke(app, args)
    second = runner.invoke(app, args + ["--set", "seed=3"])
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    runs = sorted((tmp_path / "cpi-toy").iterdir())
    assert len(runs) == 2
    out = tmp_path / "both.html"
    result = runner.invoke(app, ["report", *map(str, runs), "--out", str(out)])
    assert result.exit_code == 0
    assert out.read_text().count("<h2>") == 2
