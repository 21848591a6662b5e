"""Data: conflict items and their suites (`facts`, `suites`, `needle`, `numeric`), instruction
rows for finetuning (`instructions`, `instruction_rows`), file loaders, layout presets and
published benchmarks by name (`loaders`, `tables`, `presets`, `hub`, `benchmarks`), prompt
rendering (`prompts`), conditions, data quality checks, and the
made-up people world (`people`). Shipped tables are in `files/`.
"""
