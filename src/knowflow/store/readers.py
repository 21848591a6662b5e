"""The one reader of JSON, JSONL and CSV files, knowflow's own and the user's.

Every decoding problem becomes a `DataError` naming the file and line: bytes that are not
UTF-8, damaged JSON, a number too long for Python's int conversion, nesting too deep for the
parser, NaN/Infinity in a user's file, a CSV row whose cell count differs from the header's,
a column named twice. A UTF-8 byte-order mark (Excel, Notepad) is accepted and dropped.
"""

from __future__ import annotations

import csv
import io
import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from knowflow.errors import DataError


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of JSONL text, split at "\n" (and "\r\n") only: U+2028, U+2029,
    U+0085 and other characters `str.splitlines` breaks at are valid inside JSON strings
    (`json.dumps(ensure_ascii=False)` and pandas write them raw)."""
    for n, line in enumerate(text.split("\n"), start=1):
        yield n, line.removesuffix("\r")


def read_json(path: str | Path, hint: str | None = None) -> Any:
    """A JSON file knowflow wrote; damage is a `DataError` naming the file and line."""
    return decode_json(read_text(path, hint), path, what="damaged JSON", hint=hint,
                       strict=False)


def read_jsonl(path: str | Path, hint: str | None = None) -> list[dict]:
    """A JSONL file knowflow wrote; damage is a `DataError` naming the file and line."""
    return [decode_json(line, path, line=n, what="damaged JSON line", hint=hint, strict=False)
            for n, line in jsonl_lines(read_text(path, hint))
            if line.strip()]


CSV_FIELD_LIMIT = 2**31 - 1  # csv's default is 131,072 characters: far below a model's window
_LONG_NUMBER = re.compile(r"\d{4000,}")


# Leading bytes of files that are not text, so a refusal says what the file is
_NOT_TEXT = ((b"\x1f\x8b", "a gzip-compressed file", "decompress it first (gunzip FILE)"),
             (b"BZh", "a bzip2-compressed file", "decompress it first (bunzip2 FILE)"),
             (b"\xfd7zXZ\x00", "an xz-compressed file", "decompress it first (unxz FILE)"),
             (b"\x28\xb5\x2f\xfd", "a zstd-compressed file", "decompress it first (unzstd FILE)"),
             (b"PK\x03\x04", "a zip archive (an Excel .xlsx workbook is one)",
              "unzip it, or save the sheet as CSV (UTF-8)"),
             (b"\xd0\xcf\x11\xe0", "an old Excel/Office file (.xls)", "save the sheet as CSV "
              "(UTF-8)"),
             (b"PAR1", "a parquet file with another extension", "name it FILE.parquet"))
READS = ("knowflow reads JSONL, a JSON list, CSV with commas, parquet, datasets save_to_disk "
         "folders and hf: datasets")


def input_file(path: str | Path, what: str = "no such file") -> Path:
    """`path` as an input file that can be read twice (checked, then loaded); else a
    `DataError` saying what it is: standard input (`-`), a pipe (a FIFO, /dev/stdin or a
    shell's `<(...)`), a folder or nothing (`what`: the message for nothing)."""
    path = Path(path)
    if str(path) == "-":
        raise DataError(path, "standard input is not read", hint="save the data to a file "
                        "and give its path (knowflow reads a file twice: to check it, then "
                        "to load it)")
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise DataError(path, what) from None
    except OSError as exc:
        raise DataError(path, f"cannot be read ({exc.strerror})") from None
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode):
        raise DataError(path, "a pipe or device (a FIFO, /dev/stdin or <(...)), not a file",
                        hint="save the data to a file and give its path (knowflow reads a "
                        "file twice: to check it, then to load it)")
    if not stat.S_ISREG(mode):
        raise DataError(path, "a folder, not a file" if stat.S_ISDIR(mode) else "not a file")
    return path


def read_text(path: str | Path, hint: str | None = None) -> str:
    """The UTF-8 text of `path` without a leading byte-order mark; a compressed file, an
    archive or a workbook is a `DataError` saying what it is and what is read."""
    data = Path(path).read_bytes()
    for magic, what, fix in _NOT_TEXT:
        if data.startswith(magic):
            if magic == b"PK\x03\x04" and Path(path).suffix.lower() in (".xlsx", ".xlsm"):
                what = "an Excel workbook (.xlsx)"
            raise DataError(path, f"{what}, not text; {READS}", hint=fix)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x})", line=line,
                        hint=hint or "save the file as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def decode_json(text: str, path: str | Path, line: int = 1, what: str = "invalid JSON",
                hint: str | None = None, strict: bool = True, pos: int = 0,
                whole: bool = True, pairs_hook=None) -> Any:
    """`json.loads(text)` (or, with `whole=False`, one value at `pos`: (value, end)); every
    failure is a `DataError` at `line` (the line `text` starts on in the file) plus the line
    of the problem within `text`. `strict`: NaN and Infinity are refused (a user's file);
    `pairs_hook`: json's `object_pairs_hook` (what sees a key given twice)."""
    decoder = json.JSONDecoder(parse_constant=_no_constants if strict else None,
                               object_pairs_hook=pairs_hook)

    def at(p: int) -> int:
        return line + text.count("\n", 0, p)

    try:
        if whole:
            return decoder.decode(text)
        return decoder.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"{what} ({exc.msg})", line=at(exc.pos), hint=hint) from None
    except RecursionError:
        raise DataError(path, f"{what} (nested too deeply for the JSON reader)", line=at(pos),
                        hint=hint or "flatten the record") from None
    except ValueError as exc:  # NaN/Infinity (strict), or an integer of 4300+ digits
        found = _LONG_NUMBER.search(text, pos)
        if "digits" in str(exc) and found is not None:
            raise DataError(path, f"{what} (a number of {len(found.group())} digits)",
                            line=at(found.start()), hint=hint or "give an ordinary number"
                            ) from None
        raise DataError(path, f"{what} ({exc})", line=at(pos), hint=hint) from None


def json_records(path: str | Path, strict: bool = True, text: str | None = None
                 ) -> Iterator[tuple[int, object]]:
    """(line number, record) of a JSONL file or of a file holding one JSON list (`text`: its
    text, already read)."""
    text = read_text(path) if text is None else text
    start = text.lstrip()[:1]
    if start not in ("[", "{", ""):
        _not_json(path, text)
    if start == "[":
        records = _json_list(Path(path), text, strict)
    else:
        records = _jsonl_records(path, text, strict)
    for n, rec in records:
        _check_strings(path, n, rec)
        yield n, rec


def _jsonl_records(path, text: str, strict: bool) -> Iterator[tuple[int, object]]:
    first = True
    for n, raw in jsonl_lines(text):
        if raw.strip():
            try:
                rec = decode_json(raw, path, line=n, strict=strict)
            except DataError:
                if first:
                    _one_json_value(path, text, strict)
                raise
            first = False
            yield n, rec


def _one_json_value(path, text: str, strict: bool) -> None:
    """A file whose first line is not a record but whose whole text is one JSON object (a
    pretty-printed object, such as {"data": [...]}): say so, with the fix."""
    try:
        value = decode_json(text, path, strict=strict)
    except DataError:
        return
    if not isinstance(value, dict):
        return
    lists = [k for k, v in value.items() if isinstance(v, list)]
    what = (f"a JSON object holding a list under {lists[0]!r}" if len(lists) == 1 else
            "one JSON object written over several lines")
    raise not_a_list(path, what, line=1)


def not_a_list(path, what: str, line: int) -> DataError:
    """The error for a JSON object where records were expected (`what` says which object)."""
    return DataError(path, f"{what}, not JSONL or a JSON list; {READS}", line=line,
                     hint="give the list itself ([{...}, ...]) or one record per line (JSONL)")


def _not_json(path, text: str) -> None:
    """Text that starts with neither a record nor a list: name the tabular layout it has."""
    head = text.lstrip().split("\n", 1)[0]
    suffix = Path(path).suffix.lower()
    if suffix in (".tsv", ".tab") or "\t" in head:
        raise DataError(path, f"tab-separated text (TSV), not JSON; {READS}", line=1,
                        hint="save it as CSV with commas (FILE.csv) or as JSONL")
    for sep, name in ((";", "semicolons"), (",", "commas")):
        if sep in head:
            fix = "save it with commas as separators, named FILE.csv" if sep == ";" else \
                "name it FILE.csv"
            raise DataError(path, f"text separated by {name}, not JSON; {READS}", line=1,
                            hint=fix)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_strings(path, line: int, record: object) -> None:
    """A lone surrogate escape ("\\ud800") decodes to no character: name its field. Walks the
    record's keys and strings without recursion (JSON alone can hold them: UTF-8 text and
    Arrow cannot)."""
    stack: list[tuple[tuple, object]] = [((), record)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where)
                raise DataError(path, "a lone surrogate escape (such as \\ud800) is not a "
                                "character", line=line, field=field.lstrip(".") or None,
                                hint="write the character itself, or a pair of escapes")
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                stack += [((*where, key), item), ((*where, key), key)]
        elif isinstance(value, list):
            stack += [((*where, i), item) for i, item in reversed(list(enumerate(value)))]


def _json_list(path: Path, text: str, strict: bool) -> Iterator[tuple[int, object]]:
    """Elements of a top-level JSON array, each with the line it starts on."""
    def skip(p: int) -> int:
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    def line_of(p: int) -> int:
        return text.count("\n", 0, p) + 1

    pos = skip(text.index("[") + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        rec, end = decode_json(text, path, strict=strict, pos=pos, whole=False)
        yield line_of(pos), rec
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            if text[skip(pos + 1):].strip():
                raise DataError(path, "text after the JSON list", line=line_of(pos))
            return
        raise DataError(path, "invalid JSON (expected ',' or ']')", line=line_of(pos))


def csv_rows(path: str | Path) -> tuple[list[str], Iterator[tuple[int, dict]]]:
    """The header of a CSV file and its rows as (line the row starts on, {column: cell}).
    A column named twice, or a row with more or fewer cells than the header, is refused."""
    csv.field_size_limit(CSV_FIELD_LIMIT)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    try:
        header = next(reader, [])
    except csv.Error as exc:
        raise DataError(path, f"not a readable CSV header ({exc})", line=1) from None
    if len(header) == 1:
        for sep, name in (("\t", "tabs"), (";", "semicolons")):
            if sep in header[0]:
                raise DataError(path, f"a CSV file separated by {name}; {READS}", line=1,
                                hint="save it with commas as separators (in Excel: CSV UTF-8 "
                                "(Comma delimited))")
    seen: dict[str, int] = {}
    for i, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(path, f"column {name!r} appears twice (columns {seen[name]} and "
                            f"{i})", line=1, hint="rename or remove one of them")
        seen[name] = i

    def rows() -> Iterator[tuple[int, dict]]:
        start = reader.line_num + 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DataError(path, f"unreadable row ({exc})", line=start) from None
            if row and len(row) != len(header):
                raise DataError(path, f"{len(row)} cells, but the header has {len(header)} "
                                "columns", line=start,
                                hint="quote cells that hold a comma or a quote (\"a, b\")")
            if row:
                yield start, dict(zip(header, row, strict=True))
            start = reader.line_num + 1

    return header, rows()
