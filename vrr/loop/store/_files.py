"""The file formats of a run: its JSON files, its appended part files and its frozen ``.jsonl.gz`` window.

``config.json`` and ``run_meta.json`` are written with sorted keys and read back as objects (a corrupt
one is a :class:`RunStoreError` naming it); part files are appended and fsynced a batch at a time; the
frozen window is written to a temporary name, then renamed.
"""
from __future__ import annotations

import gzip
import json
import os
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


def append_records(path: Path, records: Iterable[dict]) -> None:
    data = b"".join((json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n").encode() for r in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_jsonl_gz(path: Path, records: Iterable[dict]) -> None:
    lines = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    atomic_write_bytes(path, gzip.compress(lines.encode(), mtime=0))


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def unique_by_index(records: list[dict]) -> list[dict]:
    """The first record of each (split, index), sorted by index."""
    seen, out = set(), []
    for r in records:
        key = (r.get("split"), r["index"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return sorted(out, key=lambda r: r["index"])
