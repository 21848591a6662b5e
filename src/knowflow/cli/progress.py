"""The CLI's one progress adapter: a `knowflow.store.run_folder.Progress` that draws rich bars."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from knowflow.cli.common import err_console


class Bars:
    """`progress(done, total, stage)` as one bar per stage (a report without a stage goes to
    the bar named `description`). The bars appear at the first report, so an error found while
    checking the input prints alone; use as a context manager to stop them."""

    def __init__(self, description: str = "", console: Console | None = None):
        self.description = description
        self.bars = Progress("{task.description}", BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=console or err_console,
                             transient=False)
        self.tasks: dict[str, int] = {}

    def __call__(self, done: int, total: int, stage: str = "") -> None:
        label = stage or self.description
        if not self.tasks:
            self.bars.start()
        if label not in self.tasks:
            self.tasks[label] = self.bars.add_task(label, total=total)
        self.bars.update(self.tasks[label], completed=done, total=total)

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc) -> None:
        if self.tasks:
            self.bars.stop()
