"""Fixtures for the report tests: small fake run folders (no experiment is run).

The builders live in `benchmarks/docs/check_report_browser.py`, which renders the same fake runs in
headless Chromium; loading it here keeps one definition of a fake run.
"""

from pathlib import Path

import pytest

from helpers import load_benchmark


def _load_browser_check():
    return load_benchmark("docs/check_report_browser")


@pytest.fixture(scope="session")
def browser_check():
    """The benchmark script as a module: fake-run builders, `render`, `problems`."""
    return _load_browser_check()


@pytest.fixture
def inversion_run(tmp_path, browser_check) -> Path:
    return browser_check.fake_inversion_tiny_run(tmp_path)


@pytest.fixture
def cpi_run(tmp_path, browser_check) -> Path:
    return browser_check.fake_cpi_toy_run(tmp_path)


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Every matplotlib Figure saved while the test runs, in order: the report functions close
    their figures after writing the PNG, so a test inspects the panels and lines through this."""
    from matplotlib.figure import Figure

    figures: list = []
    real = Figure.savefig

    def savefig(fig, *args, **kwargs):
        figures.append(fig)
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


@pytest.fixture
def png_shape():
    """(height, width, channels) of a nonempty PNG file, read back with matplotlib."""
    import matplotlib.image

    def shape(path: Path) -> tuple[int, ...]:
        assert path.stat().st_size > 0, path
        return matplotlib.image.imread(path).shape

    return shape
