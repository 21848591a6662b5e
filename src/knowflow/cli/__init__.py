"""The `knowflow` command line (entry point `knowflow.cli:app`).

One module per command group: `experiments` (list, config, run, report), `eval`, `sft` (sft,
curate, augment), `probe`, `export`; `common` holds the shared checks and the one console,
`errors` the error boundary, `progress` the progress bars, `main` the app that joins them.
"""

from knowflow.cli.main import app, entry

__all__ = ["app", "entry"]
