"""What a run writes and reads, in one place.

- `files`: atomic writes (temp file + rename) and `file_group` (several files, all or none);
- `readers`: the one reader of JSON, JSONL and CSV, the project's and the user's;
- `schemas`: the schemas of the files read back, checked where they are read;
- `identity`: what makes a folder a run (`run.json`) and the names of its files;
- `lock`: the claim that keeps two processes out of one folder;
- `outputs`: where a command may write, checked before any work;
- `staging`: folders written under a hidden name and renamed into place when complete;
- `run_folder`: the run folder (`RunFolder`, `start_run`, resume, `PartStore`);
- `checks`: a run folder's files checked before `--resume` or `report` reads them;
- `result`: `Result`, what every entry point returns, saved as and loaded from a run folder.
"""
