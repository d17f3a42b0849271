"""The file formats of a run: its JSON files, its appended part files and its frozen ``.jsonl.gz`` window.

``config.json`` and ``run_meta.json`` are written with sorted keys and read back as objects (a corrupt
one is a :class:`RunStoreError` naming it); part files are appended and fsynced a batch at a time; the
frozen window is written to a temporary name, then renamed.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path
from typing import Iterable

from ...common.atomic import atomic_write_bytes
from ...common.jsonio import write_json
from ._errors import RunStoreError, folder_error


def write_record_json(path: Path, obj) -> None:
    """config.json / run_meta.json: sorted keys, indent 1, trailing newline (small diffs)."""
    write_json(path, obj, indent=1, sort_keys=True, trailing_newline=True)


def read_run_json(path: Path) -> dict:
    """A run's JSON file (``config.json``, ``run_meta.json``) as a dict.

    A missing, non-UTF-8, non-JSON or non-object file is a :class:`RunStoreError` naming it.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RunStoreError(path, "missing (no run was started in this folder)") from None
    except NotADirectoryError as exc:
        raise folder_error(path, "read it", exc) from None
    except OSError as exc:
        raise RunStoreError(path, f"unreadable ({exc.strerror or type(exc).__name__})") from None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RunStoreError(path, f"not UTF-8 ({exc.reason} at byte {exc.start}); restore it from a copy "
                                  "or delete it") from None
    except json.JSONDecodeError as exc:
        raise RunStoreError(path, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                                  "restore it from a copy or delete it") from None
    if not isinstance(obj, dict):
        raise RunStoreError(path, f"not a JSON object ({type(obj).__name__})")
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")


def record_line(record) -> str:
    """One record as its JSON line: sorted keys, text as itself, except a lone surrogate (model text is
    arbitrary: "\\ud800" has no UTF-8 form) which is written as its JSON escape, so it reads back as it
    was. JSON cannot tell a high surrogate escaped right before a low one from the character the pair
    encodes: such a pair, which no decoded text holds, reads back as that character."""
    line = json.dumps(record, ensure_ascii=False, sort_keys=True)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", line) + "\n"


def append_records(path: Path, records: Iterable[dict]) -> None:
    data = b"".join(record_line(r).encode() for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_jsonl_gz(path: Path, records: Iterable[dict]) -> None:
    lines = "".join(record_line(r) for r in records)
    atomic_write_bytes(path, gzip.compress(lines.encode(), mtime=0))


def read_jsonl_gz(path: Path) -> list[dict]:
    """The records of a frozen window file, in order. A file that is missing, not gzip, cut short, not
    UTF-8, or holds a line that is not a JSON object is a :class:`RunStoreError` naming it (and the line)."""
    try:
        raw = gzip.decompress(path.read_bytes())
    except FileNotFoundError:
        raise RunStoreError(path, "missing") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise RunStoreError(path, f"not a complete gzip file ({exc}); restore it from a copy or finalize "
                                  "the run again") from None
    out = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise RunStoreError(path, f"line {number}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise RunStoreError(path, f"line {number}: not JSON ({why})") from None
        if not isinstance(rec, dict):
            raise RunStoreError(path, f"line {number}: not a JSON object ({type(rec).__name__})")
        out.append(rec)
    return out


def unique_by_index(records: list[dict]) -> list[dict]:
    """The first record of each (split, index), sorted by index."""
    seen, out = set(), []
    for r in records:
        key = (r.get("split"), r["index"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return sorted(out, key=lambda r: r["index"])
