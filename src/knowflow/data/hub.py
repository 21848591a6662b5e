"""Hub datasets as `--data`: `hf:ORG/NAME[:CONFIG][@SPLIT]` or a benchmark's name
(`benchmarks.py`: `nq-swap`, ...), read through `datasets`.

`loaders.py` calls `hub_table` where it would open a file, so a hub dataset goes through the
same column mapping, presets and row checks as a file. `datasets.load_dataset` does the
fetching: online it downloads (or reuses its cache); offline (`HF_DATASETS_OFFLINE=1` or
`HF_HUB_OFFLINE=1`) it reads its cache, `HF_HOME/datasets/ORG___NAME/CONFIG/VERSION/HASH/`
(`hub_cache.lay_out_hub_dataset` writes one for tests and demos). Without SPLIT, a dataset with
one split is read whole; with several, `test`, then `validation`, then `dev` is read, else the
error lists the splits. Every failure is one `DataError` naming the dataset (and the
benchmark name that chose it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from knowflow.data.benchmarks import BENCHMARKS, named
from knowflow.errors import DataError

PREFIX = "hf:"
EVAL_SPLITS = ("test", "validation", "dev")  # read in this order when no split is given
_SPEC = re.compile(r"hf:(?P<repo>[^/:@\s]+/[^/:@\s]+)(?::(?P<config>[^:@\s]+))?"
                   r"(?:@(?P<split>[^@\s]+))?")


@dataclass(frozen=True)
class HubSpec:
    """A parsed `hf:ORG/NAME[:CONFIG][@SPLIT]`; `benchmark` is the registered name that chose
    it (`benchmarks.py`), if any, and `preset` the layout that name reads it with."""

    repo: str
    config: str | None = None
    split: str | None = None
    benchmark: str | None = None
    preset: str | None = None

    @property
    def hub_id(self) -> str:
        """`hf:ORG/NAME[:CONFIG][@SPLIT]`."""
        return PREFIX + self.repo + (f":{self.config}" if self.config else "") + \
            (f"@{self.split}" if self.split else "")

    def __str__(self) -> str:
        return f"{self.benchmark} ({self.hub_id})" if self.benchmark else self.hub_id

    @property
    def suite(self) -> str:
        """The suite name of its items: the benchmark's name, else the config if one is
        named, else the dataset's."""
        return self.benchmark or self.config or self.repo.split("/")[1]


def is_hub(data: object) -> bool:
    """Whether `data` (a `--data` value) names a hub dataset rather than a file: `hf:...`, or
    a benchmark's name when no file of that name exists (`benchmarks.named`)."""
    return isinstance(data, (str, Path)) and (str(data).startswith(PREFIX)
                                              or named(data) is not None)


def resolve(data: str | Path) -> HubSpec:
    """The hub dataset a `--data` value names (`is_hub`): a benchmark's registered one, with
    its name and preset, or the parsed `hf:` spec. A benchmark with no hub copy cited is a
    `DataError` saying which files to give instead."""
    bench = named(data)
    if bench is None:
        return parse_spec(str(data))
    if not bench.hub:
        raise DataError(bench.name, "no hub copy of this benchmark is registered",
                        hint=bench.download_hint())
    spec = parse_spec(bench.hub)
    return HubSpec(spec.repo, spec.config, spec.split, bench.name, bench.preset)


def parse_spec(text: str) -> HubSpec:
    """`hf:ORG/NAME[:CONFIG][@SPLIT]` -> HubSpec; anything else is a `DataError` naming it."""
    match = _SPEC.fullmatch(str(text).strip())
    if match is None:
        raise DataError(text, "not a hub dataset: expected hf:ORG/NAME[:CONFIG][@SPLIT]",
                        hint="e.g. hf:pminervini/NQ-Swap@dev")
    return HubSpec(match["repo"], match["config"], match["split"])


def offline() -> bool:
    """Whether `datasets` may not reach the Hub (it reads only its cache then)."""
    return any(os.environ.get(k, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def hub_table(spec: HubSpec):
    """The Arrow table of one split of the dataset `spec` names."""
    try:
        import datasets
    except ImportError:
        raise DataError(spec, "reading a hub dataset needs the datasets package, one of "
                        "knowflow's dependencies", hint="pip install datasets (or reinstall "
                        "knowflow)") from None
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity_error()  # its cache notes; download bars stay on
    try:
        loaded = datasets.load_dataset(spec.repo, spec.config, split=spec.split)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line naming the dataset
        raise _load_error(spec, exc) from None
    finally:
        datasets.logging.set_verbosity(verbosity)
    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded[_pick_split(spec, list(loaded))]
    return loaded.data


def _pick_split(spec: HubSpec, splits: list[str]) -> str:
    if len(splits) == 1:
        return splits[0]
    found = next((s for s in EVAL_SPLITS if s in splits), None)
    if found is None:
        raise DataError(spec, f"several splits ({', '.join(splits)}) and none of "
                        f"{', '.join(EVAL_SPLITS)}", hint=f"name one: {spec.hub_id}@{splits[0]}")
    return found


def _load_error(spec: HubSpec, exc: Exception) -> DataError:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    bench = BENCHMARKS.get(spec.benchmark or "")
    if offline() and isinstance(exc, (ConnectionError, FileNotFoundError)):
        fetch = f"run once online to download it into the cache (HF_HUB_OFFLINE=0 " \
                f"HF_DATASETS_OFFLINE=0 knowflow eval --data {bench.name} ...)" if bench else \
                f"fetch it once online: python -c \"import datasets; datasets.load_dataset(" \
                f"'{spec.repo}'{f', {spec.config!r}' if spec.config else ''})\""
        return DataError(spec, "not in the datasets cache, and HF_DATASETS_OFFLINE / "
                         "HF_HUB_OFFLINE forbid downloading it", hint=fetch)
    if type(exc).__name__ == "DatasetNotFoundError":
        return DataError(spec, f"not found on the Hub ({text})",
                         hint="check ORG/NAME; a gated dataset needs `hf auth login`")
    if "Dataset scripts are no longer supported" in text:
        return DataError(spec, f"could not be loaded ({text})",
                         hint=bench.download_hint() if bench and bench.files else
                         "download one of its data files and give it to --data (the "
                         "presets read files too)")
    if "Unknown split" in text or "Bad split" in text:
        return DataError(spec, f"no such split ({text})")
    if "BuilderConfig" in text or "Config name is missing" in text:
        return DataError(spec, f"no such config ({text})",
                         hint=f"name one: hf:{spec.repo}:CONFIG")
    return DataError(spec, f"could not be loaded ({type(exc).__name__}: {text})")
