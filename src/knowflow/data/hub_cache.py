"""Lay out a hub dataset in a `datasets` cache, as if `load_dataset` had downloaded it.

Tests and demos never touch the network: `lay_out_hub_dataset(hf_home, "ORG/NAME", rows)`
writes `hf_home/datasets/ORG___NAME/CONFIG/0.0.0/HASH/` (the Arrow files and
`dataset_info.json` that `datasets` writes after a download), so that with
`HF_HOME=hf_home HF_DATASETS_OFFLINE=1`, `load_dataset("ORG/NAME")` — and `knowflow eval
--data hf:ORG/NAME` — read it from the cache. The rows are first prepared by `datasets`' own
parquet builder in a scratch folder, then moved under the hub id's name, so the files are the
ones `datasets` itself writes for this version.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from knowflow.store.files import atomic_write_bytes, atomic_write_text
from knowflow.store.readers import read_json
from knowflow.store.staging import staged_dir

CACHE_HASH = "0" * 16  # any name works: offline, datasets reads the newest folder


def lay_out_hub_dataset(hf_home: str | Path, repo_id: str,
                        rows: Sequence[Mapping] | Mapping[str, Sequence[Mapping]],
                        config: str | None = None, split: str = "test") -> Path:
    """Write `rows` (or {split: rows}) as the cached dataset `repo_id` (ORG/NAME) under
    `hf_home`; returns the cache folder. Needs pyarrow and datasets."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets.naming import camelcase_to_snakecase

    org, sep, name = repo_id.partition("/")
    if not sep or not org or not name or "/" in name:
        raise ValueError(f"{repo_id!r} is not ORG/NAME")
    splits = dict(rows) if isinstance(rows, Mapping) else {split: list(rows)}
    config = config or "default"
    snake = camelcase_to_snakecase(name)
    target = Path(hf_home) / "datasets" / f"{org}___{snake}" / config / "0.0.0" / CACHE_HASH
    with tempfile.TemporaryDirectory() as scratch:
        files = {}
        for key, split_rows in splits.items():
            files[key] = str(Path(scratch) / f"{key}.parquet")
            pq.write_table(pa.Table.from_pylist(list(split_rows)), files[key])
        builder = datasets.load_dataset_builder("parquet", data_files=files,
                                                cache_dir=str(Path(scratch) / "cache"))
        quiet = datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # library code shows no bars of its own making
        try:
            builder.download_and_prepare()
        finally:
            if not quiet:
                datasets.enable_progress_bars()
        built = Path(builder.cache_dir)
        info = read_json(built / "dataset_info.json")
        info.update(config_name=config, dataset_name=snake)
        for split_info in info.get("splits", {}).values():
            split_info["dataset_name"] = snake
        if target.exists():
            shutil.rmtree(target)
        # staged and renamed into place: a full disk leaves no partial entry (nor the
        # folders made for it) that `datasets` would read
        with staged_dir(target, complete="dataset_info.json") as folder:
            for arrow in sorted(built.glob("parquet-*.arrow")):
                atomic_write_bytes(folder / arrow.name.replace("parquet-", f"{snake}-", 1),
                                   arrow.read_bytes())
            atomic_write_text(folder / "dataset_info.json", json.dumps(info))
    return target
