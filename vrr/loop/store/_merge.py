"""A window read across every part file of a run (the run's own and every shard's), and what it lacks.

Reading a run's window (:func:`read_window_records`) merges every part file of the run, so resume skips
what any shard stored and finalizing freezes the merged window; an identical record in two files counts
once, two different records of one instance are an error. :func:`missing_instances` says which
instances no part file holds yet, by the shard they fall to.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable

from ._errors import RunStoreError
from ._paths import PROBE_PART_NAME, TRAJ_PART_NAME, RunPaths, part_kind
from ._records import read_records
from ._shard import shard_of_file
from ._window import Window, in_window


def sibling_parts(path: Path) -> list[Path]:
    """The other part files of the same kind in a run's folder: the run's own and every shard's."""
    kind = part_kind(path)
    if kind is None:
        return []
    name = TRAJ_PART_NAME if kind == "trajectories" else PROBE_PART_NAME
    paths = RunPaths(path.parent.parent, path.parent.name)
    return [p for p in [paths.dir / name, *paths.shard_files(name)] if p != path and p.exists()]


def read_window_records(path: Path, window: Window, repair: bool = False) -> list[dict]:
    """The window's instances stored in the run's part files, sorted by index (one per instance).

    ``path`` is read against ``window`` (and repaired with ``repair``); the other part files of the
    run (:func:`sibling_parts`: the run's own when ``path`` is a shard's, every shard's) are read
    against their own windows and never modified, and their records of ``window`` are merged in.
    An identical record in two files counts once; two different records of one instance are a
    :class:`RunStoreError` naming both files.
    """
    merged: dict[int, tuple[Path, dict]] = {}
    files = [(path, window, repair)] + [(p, replace(window, shard=shard_of_file(p)), False)
                                        for p in sibling_parts(path)]
    for file, file_window, fix in files:
        for rec in read_records(file, file_window, repair=fix):
            if not in_window(rec, window):
                continue
            earlier = merged.get(rec["index"])
            if earlier is None:
                merged[rec["index"]] = (file, rec)
            elif earlier[1] != rec:
                differ = sorted(k for k in set(rec) | set(earlier[1]) if rec.get(k) != earlier[1].get(k))
                raise RunStoreError(file, f"index {rec['index']} differs from its record in {earlier[0]} (fields "
                                          f"that differ: {', '.join(differ)}): two generators ran this instance. "
                                          "Keep the right record and move the other out of its file.")
    return [merged[i][1] for i in sorted(merged)]


def index_ranges(indices: Iterable[int], step: int = 1) -> str:
    """Sorted indices written compactly: members ``step`` apart run together (``3..9``; ``2..20 step 3``
    for a shard's share of ``n`` = 3 shards), two in a row and lone ones are listed (``3, 5``)."""
    values = sorted(set(indices))
    parts, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] - values[j] == step:
            j += 1
        if j - i >= 2:
            parts.append(f"{values[i]}..{values[j]}" + (f" step {step}" if step != 1 else ""))
        else:
            parts += [str(v) for v in values[i:j + 1]]
        i = j + 1
    return ", ".join(parts)


def missing_instances(part: Path, want: Iterable[int], done: Iterable[int]) -> str:
    """The instances of a window that no part file of the run holds yet, as one line ('' when none).

    ``part`` is the run's own part file of the window's kind (``trajectories.part.jsonl`` or
    ``probe.part.jsonl``; it need not exist). When the run's folder holds the part files of one split
    into shards, the missing indices are grouped by the shard they fall to, and a shard without a
    part file is said never to have run; else they are listed as ranges (:func:`index_ranges`).
    """
    want = set(want)
    missing = sorted(want - set(done))
    if not missing:
        return ""
    what = {"trajectories": "trajectories", "probe": "probe plans"}.get(part_kind(part), "instances")
    head = f"{len(missing)} of {len(want)} {what} missing"
    shards = [shard_of_file(p) for p in RunPaths(part.parent.parent, part.parent.name).shard_files(part.name)]
    counts = sorted({s.count for s in shards})
    if len(counts) != 1:  # no shards, or shards of several splits: the indices alone
        splits = f" (part files of shard splits {', '.join(f'n={n}' for n in counts)})" if counts else ""
        return f"{head}{splits}: indices {index_ranges(missing)}"
    count, ran = counts[0], {s.index for s in shards}
    groups = []
    for index in range(count):
        share = [i for i in missing if i % count == index]
        if share:
            state = "ran, incomplete" if index in ran else "never ran: no part file"
            groups.append(f"shard {index}/{count} ({state}): {len(share)}, indices {index_ranges(share, count)}")
    return f"{head}: " + "; ".join(groups)
