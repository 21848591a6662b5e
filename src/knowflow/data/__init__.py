"""Data: conflict items and their suites (`facts`, `suites`, `needle`, `numeric`), instruction
rows for finetuning (`instructions`, `instruction_rows`), file loaders and layout presets
(`loaders`, `tables`), prompt rendering (`prompts`), conditions, data quality checks, and the
made-up people world (`people`). Shipped tables are in `files/`.
"""
