"""The records of one part file: read, validated against the run's window, and bad lines set aside.

A line that is not a record, is foreign to the run or has the wrong shape is set aside (to
``<part file>.rejected``, one JSON object each with the source file, line number and reason, when
repairing), never at the cost of the good ones; a torn last line of a crash mid-write is set aside the
same way. :func:`read_part` checks a part file against the window of the ``config.json`` beside it.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import time
import warnings
from dataclasses import replace
from pathlib import Path

from ...common.atomic import atomic_write_bytes
from ..config import from_stored
from ._config import read_stored_config
from ._errors import RunStoreError
from ._files import record_line
from ._paths import RunPaths, part_kind
from ._shard import shard_of_file
from ._window import FOREIGN, Window, probe_window, record_shape_problem, trajectory_window, window_membership


class PartFileWarning(UserWarning):
    """A part file had lines that are not records of its run; they were set aside, not lost."""


def _parse_line(line: bytes) -> tuple[dict | None, str]:
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg})"
    except RecursionError:
        return None, "not JSON (nested too deeply)"
    if not isinstance(rec, dict):
        return None, f"not a JSON object ({type(rec).__name__})"
    if not isinstance(rec.get("index"), int) or isinstance(rec.get("index"), bool):
        return None, "no integer 'index'"
    return rec, ""


def rejected_path(part: Path) -> Path:
    """Where lines set aside from ``part`` go: ``<part>.rejected``."""
    return part.with_name(part.name + ".rejected")


def _rejected_entry(part: Path, number: int, line: bytes, reason: str) -> bytes:
    entry = {"source": part.name, "line": number, "reason": reason,
             "set_aside_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        entry["text"] = line.decode("utf-8")
    except UnicodeDecodeError:
        entry["base64"] = base64.b64encode(line).decode("ascii")
    return record_line(entry).encode()


def read_rejected(part: Path) -> list[dict]:
    """The lines set aside from ``part``: dicts with ``source``, ``line``, ``reason`` and ``raw``
    (the line's exact bytes)."""
    path = rejected_path(part)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RunStoreError(path, f"unreadable ({exc.strerror or type(exc).__name__})") from None
    out = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line.decode("utf-8"))
            if not isinstance(entry, dict):
                raise ValueError(f"not a JSON object ({type(entry).__name__})")
            if "base64" in entry:
                if not isinstance(entry["base64"], str):
                    raise ValueError("field 'base64' is not a string")
                entry["raw"] = base64.b64decode(entry["base64"], validate=True)
            elif isinstance(entry.get("text"), str):
                entry["raw"] = entry["text"].encode("utf-8", "surrogatepass")
            else:
                raise ValueError("neither a string 'text' nor 'base64'")
        except UnicodeDecodeError as exc:
            raise RunStoreError(path, f"line {number}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        except RecursionError:
            raise RunStoreError(path, f"line {number}: not JSON (nested too deeply)") from None
        except (ValueError, binascii.Error) as exc:
            why = f"not JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise RunStoreError(path, f"line {number}: {why}") from None
        out.append(entry)
    return out


def _key(rec: dict) -> tuple:
    return rec.get("setting"), rec.get("dataset"), rec.get("split"), rec["index"]


def read_records(path: Path, window: Window | None = None, repair: bool = True) -> list[dict]:
    """The records of a part file, in file order; a bad line never costs the good ones.

    A line is set aside when it is not a record (not UTF-8, not JSON, not an object with an
    integer ``index``, or the torn last line of a crash mid-write), and, given the ``window``,
    when it is foreign to the run (another setting, dataset or split, or before the window's
    start: :func:`window_membership`) or has the wrong shape (:func:`record_shape_problem`). An
    identical copy of an earlier record is set aside as a duplicate. Records of the run past the
    window's end are kept and returned. Every line set aside is reported with the file, line
    number and reason (:class:`PartFileWarning`).

    Two different records of one instance are a :class:`RunStoreError` naming both lines; nothing
    is modified then.

    ``repair=True`` moves the lines set aside to ``<file>.rejected`` (source, line number, reason
    and the exact text) and rewrites the part file atomically with the kept records, so later
    appends start on a clean line. Only the holder of the run's lock (:func:`run_lock`) may
    repair: a rewrite under a running generator would lose its next appends.
    """
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    torn = lines.pop() if lines else b""  # after the last newline: empty, or a line cut by a crash
    recs: list[dict] = []
    good_lines: list[bytes] = []
    bad: list[tuple[int, bytes, str]] = []
    first_seen: dict[tuple, tuple[int, dict]] = {}
    conflicts: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        rec, problem = _parse_line(line)
        if rec is None:
            bad.append((number, line, problem))
            continue
        if window is not None:
            place, why = window_membership(rec, window)
            if place == FOREIGN:
                bad.append((number, line, f"not a record of {window.describe()}: {why}"))
                continue
            shape = record_shape_problem(rec, window)
            if shape:
                bad.append((number, line, f"malformed {window.kind} record (index {rec['index']}): {shape}"))
                continue
        key = _key(rec)
        if key in first_seen:
            earlier, earlier_rec = first_seen[key]
            if rec == earlier_rec:
                bad.append((number, line, f"identical copy of line {earlier} (duplicate collapsed)"))
            else:
                differ = sorted(k for k in set(rec) | set(earlier_rec) if rec.get(k) != earlier_rec.get(k))
                conflicts.append(f"{path}:{earlier} and {path}:{number} are two different records of index "
                                 f"{rec['index']} (fields that differ: {', '.join(differ)})")
            continue
        first_seen[key] = (number, rec)
        recs.append(rec)
        good_lines.append(line)
    if conflicts:
        raise RunStoreError(path, "conflicting duplicate records: " + "; ".join(conflicts[:5])
                            + (f" (and {len(conflicts) - 5} more)" if len(conflicts) > 5 else "")
                            + ". Keep the right record of each instance and move the other out of the file.")
    if torn.strip():
        bad.append((len(lines) + 1, torn, "torn last line (no newline: the write was interrupted)"))
    if bad:
        shown = "; ".join(f"line {n}: {why}" for n, _, why in bad[:5]) + (" ..." if len(bad) > 5 else "")
        action = f"moved to {rejected_path(path).name}" if repair else "skipped (left in the file)"
        warnings.warn(f"{path}: {len(bad)} bad line(s) {action}, {len(recs)} records kept ({shown})",
                      PartFileWarning, stacklevel=2)
        if repair:
            entries = b"".join(_rejected_entry(path, n, line, why) for n, line, why in bad)
            with open(rejected_path(path), "ab") as f:
                f.write(entries)
                f.flush()
                os.fsync(f.fileno())  # set aside durably before the part file loses the lines
            atomic_write_bytes(path, b"".join(line + b"\n" for line in good_lines))
    return recs


def part_window(path: Path) -> Window | None:
    """The window of a run's part file (a shard's file: that shard's window), from the ``config.json``
    beside it (None for a file that is not a run's part file or has no config beside it)."""
    paths = RunPaths(path.parent.parent, path.parent.name)
    kind = part_kind(path)
    if kind is None or not paths.config.exists():
        return None
    cfg = from_stored(read_stored_config(paths), str(paths.config))
    window = trajectory_window(cfg) if kind == "trajectories" else probe_window(cfg)
    return replace(window, shard=shard_of_file(path))


def read_part(path: Path, repair: bool = True) -> list[dict]:
    """The records of a part file (:func:`read_records`), checked against the window of the run's
    ``config.json`` beside it when there is one (:func:`part_window`): foreign and malformed
    records are set aside, conflicting duplicates are an error. Records past the window's end are
    returned too; :func:`in_window` selects the window's instances."""
    return read_records(path, part_window(path), repair=repair)
