"""Published knowledge-conflict benchmarks by name: `--data nq-swap` reads the benchmark's hub
dataset with its layout preset, as `--model` reads a model by its hub id.

`BENCHMARKS` is the one registry: a name, the hub dataset it reads
(`hf:ORG/NAME[:CONFIG][@SPLIT]`, read by `hub.py`: downloaded online, read from the `datasets`
cache offline), the preset of `presets.py` its columns are read with, its size in rows where
recorded, where it was published, and the files to download where the hub copy cannot be read
(or none is cited). A hub id is registered only where knowflow's presets already cite it; a
benchmark with no hub copy is still a name, so that `--data memotrap` says which files to get
instead of "no such file".

A name never shadows a file: `--data nq-swap` reads the file or folder `nq-swap` in the working
folder when there is one (`named`). Names ignore case.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

from knowflow.errors import DataError


@dataclass(frozen=True)
class Benchmark:
    """One published benchmark: `hub` is "" where no hub copy is cited (then `files` says what
    to download); `rows` is None where its size is not recorded here (the run's `n` counts
    what was read)."""

    name: str
    preset: str
    source: str
    hub: str = ""
    rows: int | None = None
    files: tuple[str, ...] = ()  # the files published, where the hub copy is not read
    files_from: str = ""

    def download_hint(self) -> str:
        """How to read it from files instead of the hub."""
        return f"download {', '.join(self.files)} from {self.files_from}; --data reads " \
               f"{'each' if len(self.files) > 1 else 'it'} with the {self.preset} preset"

    def row(self) -> dict[str, object]:
        """The registry row `list_benchmarks` gives (and `knowflow list` shows)."""
        return {"name": self.name, "hub": self.hub or None, "preset": self.preset,
                "rows": self.rows, "source": self.source}


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("nq-swap", "nq-swap", hub="hf:pminervini/NQ-Swap@dev",
              source="Longpre et al. 2021, Entity-Based Knowledge Conflicts in Question "
                     "Answering (EMNLP): Natural Questions passages with the answer entity "
                     "swapped"),
    Benchmark("conflictqa", "conflictqa", hub="hf:osunlp/ConflictQA:ConflictQA-popQA-chatgpt@test",
              source="Xie et al. 2024, Adaptive Chameleon or Stubborn Sloth (ICLR): PopQA "
                     "questions with ChatGPT's memory answer and a counter-memory passage",
              files=("conflictQA-popQA-chatgpt.json",),
              files_from="the osunlp/ConflictQA repository"),
    Benchmark("memotrap", "memotrap",
              source="Liu and Liu 2023, MemoTrap (Inverse Scaling Prize): instructions to end "
                     "a well-known saying differently",
              files=("1-proverb-ending.csv", "2-proverb-translation.csv",
                     "3-hate-speech-ending.csv", "4-history-of-science-qa.csv"),
              files_from="MemoTrap's release"),
    Benchmark("clasheval", "clasheval",
              source="Wu, Wu and Zou 2024, ClashEval: questions with a context modified to a "
                     "wrong answer",
              files=("dataset.pqt",), files_from="ClashEval's release"),
)}


def named(data: object) -> Benchmark | None:
    """The benchmark a `--data` value names, or None: not a registered name (in any case), or
    a file or folder of that name exists (the file wins)."""
    if not isinstance(data, (str, Path)):
        return None
    text = str(data).strip()
    bench = BENCHMARKS.get(text.lower())
    return None if bench is None or Path(text).exists() else bench


def list_benchmarks() -> list[dict[str, object]]:
    """The registry, one row per benchmark: name, hub (None: no hub copy cited), preset, rows
    (None: not recorded) and source."""
    return [b.row() for b in BENCHMARKS.values()]


def no_such_file(data: object) -> DataError:
    """The error for a `--data` value that is no file: one that could have meant a benchmark
    (one word, no file suffix) says it is no benchmark name either, naming the nearest."""
    path = Path(str(data).strip())
    if path.exists() or path.suffix or len(path.parts) != 1:
        return DataError(data, "no such file")
    near = get_close_matches(path.name.lower(), list(BENCHMARKS), n=1)
    return DataError(data, f"no such file, nor a benchmark name ({', '.join(BENCHMARKS)})",
                     hint=f"did you mean {near[0]}?" if near else None)
