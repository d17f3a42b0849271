"""The trajectory store: the files of one run under ``data/real/<setting>/``.

Problem texts are never stored: problems are referred to by dataset, split and index, and
perturbations by their spec (``vrr.loop.redact`` removes verbatim restatements).

* ``config.json``                the resolved run config (``vrr.loop.config``), checked on resume,
* ``trajectories.part.jsonl``    one completed-instance record per line, appended and fsynced after
                                 each batch; on restart completed indices are skipped and a torn last
                                 line is set aside, so nothing is lost or duplicated,
* ``probe.part.jsonl``           the same for the calibration probe,
* ``<part file>.rejected``       lines set aside from a part file (malformed, foreign, duplicate), one
                                 JSON object each with the source file, line number and reason,
* ``generate.lock``              the ``fcntl.flock`` lock a generator holds for its whole session; it
                                 names the holder (pid, host, start time),
* ``run_meta.json``              engine, model, sha256, package versions, per-session timings and
                                 per-role token usage,
* ``trajectories.jsonl.gz``, ``probe.jsonl.gz``  the frozen window (written by ``vrr.label``),
* ``arrays.npz``                 the labeled arrays of the data contract (complete windows only),
                                 else ``arrays.partial.npz``.

A record belongs to a run's window when its setting, dataset and split are the run's and its index
lies in ``start .. start + n`` (:func:`window_membership`, the one predicate that resume and
finalize share); its shape (rounds, verifier outputs) must match the run's config
(:func:`record_shape_problem`). :func:`read_part` applies both to a run's part files.

A window can be split into shards (:class:`Shard`, ``python -m vrr generate SETTING --shard i/n``):
shard ``i`` of ``n`` holds the indices ``index % n == i``, so the split depends neither on the
window's start nor on its length. A shard writes its own part files, lock and run meta
(``trajectories.shard-i-of-n.part.jsonl``, ``probe.shard-i-of-n.part.jsonl``,
``generate.shard-i-of-n.lock``, ``run_meta.shard-i-of-n.json``) beside the run's shared
``config.json``. Reading a run's window (:func:`read_window_records`) merges every part file of the
run, so resume skips what any shard stored and finalizing freezes the merged window; the run meta
read back (:func:`read_run_meta`) holds every shard's sessions.
"""
from __future__ import annotations

import base64
import fcntl
import gzip
import itertools
import json
import os
import re
import socket
import time
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

from ..common.atomic import atomic_write_bytes
from ..common.jsonio import write_json
from ..common.paths import REPO_ROOT, SETTINGS_DIR
from ..settings import load_config
from .config import RunConfig, from_stored, protocol_differences, WINDOW_KEYS

DEFAULT_OUT_ROOT = REPO_ROOT / "data" / "real"
TRAJ_PART_NAME = "trajectories.part.jsonl"
PROBE_PART_NAME = "probe.part.jsonl"


class RunStoreError(ValueError):
    """A file of a run is unreadable or inconsistent; ``path`` is that file and the message starts with it."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = Path(path)
        super().__init__(f"{path}: {problem}")


class RunLockedError(RunStoreError):
    """Another process holds a run's lock; the message names the holder (pid, host, start time)."""


class IncompleteWindowError(RunStoreError):
    """A run's window lacks instances where a complete one is required; the message names them (and
    the shards they fall to)."""


class WindowError(ValueError):
    """A run's window cannot be generated (it ends past its dataset); the message names the setting and
    the setting's field."""


def folder_problem(path: str | os.PathLike) -> str:
    """Why ``path`` cannot be (or sit inside) a run folder: an ancestor that is a file, or one that
    cannot be written; '' when nothing is in the way. The first ancestor that exists decides."""
    path = Path(path)
    for folder in (path, *path.parents):
        try:
            if not folder.exists():
                continue
        except OSError as exc:
            return f"{folder} cannot be read ({exc.strerror or exc})"
        if not folder.is_dir():
            return f"{folder} is a file, not a folder"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{folder} is not writable"
        return ""
    return ""


def _folder_error(path: Path, action: str, exc: OSError) -> RunStoreError:
    """A :class:`RunStoreError` for an ``OSError`` met while ``action`` in a run folder (the out root
    is a file, the folder cannot be written, ...); it names the path and what is in the way."""
    why = folder_problem(path.parent) or f"{exc.strerror or type(exc).__name__}"
    return RunStoreError(path, f"cannot {action}: {why} (the run folder is <out root>/<run name>: "
                               "check --out-root)")


_SHARD_TAG = re.compile(r"\.shard-(\d+)-of-(\d+)\.")
MAX_SHARDS = 100_000


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based): the instances whose dataset index is ``index`` modulo
    ``count``. The share of an instance depends only on its index, so a window that grows keeps
    every instance in its shard."""

    index: int
    count: int

    def __post_init__(self):
        for name in ("index", "count"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int):
                raise ValueError(f"shard {name} must be an integer, got {getattr(self, name)!r}")
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"shard count must be 1..{MAX_SHARDS}, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index must be 0..{self.count - 1} for {self.count} shards, got {self.index}")

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"i/n"`` (``0 <= i < n``), as ``--shard`` takes it; a bad value is a ValueError naming it."""
        match = re.fullmatch(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", str(text))
        if not match:
            raise ValueError(f"--shard {text!r}: expected i/n with 0 <= i < n, e.g. 0/2 and 1/2")
        try:
            return cls(int(match.group(1)), int(match.group(2)))
        except ValueError as exc:
            raise ValueError(f"--shard {text!r}: {exc}") from None

    def owns(self, index: int) -> bool:
        return index % self.count == self.index

    @property
    def tag(self) -> str:
        """The shard's part of its file names: ``shard-i-of-n``."""
        return f"shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of_file(path: Path) -> Shard | None:
    """The shard a run file belongs to, from its name (``*.shard-i-of-n.*``); None for the run's own files."""
    match = _SHARD_TAG.search(Path(path).name)
    return Shard(int(match.group(1)), int(match.group(2))) if match else None


def _sharded_name(name: str, shard: Shard | None) -> str:
    """``trajectories.part.jsonl`` -> ``trajectories.shard-i-of-n.part.jsonl`` (the stem before the first dot)."""
    if shard is None:
        return name
    stem, rest = name.split(".", 1)
    return f"{stem}.{shard.tag}.{rest}"


class RunPaths:
    """The files of one run (``out_root/<setting>/``); with ``shard``, the files that shard writes
    (part files, lock, run meta) while the config and the frozen outputs stay the run's."""

    def __init__(self, out_root: str | os.PathLike, setting: str, shard: Shard | None = None):
        self.dir = Path(out_root) / setting
        self.shard = shard
        self.config = self.dir / "config.json"
        self.traj_part = self.dir / _sharded_name(TRAJ_PART_NAME, shard)
        self.probe_part = self.dir / _sharded_name(PROBE_PART_NAME, shard)
        self.traj = self.dir / "trajectories.jsonl.gz"
        self.probe = self.dir / "probe.jsonl.gz"
        self.meta = self.dir / _sharded_name("run_meta.json", shard)
        self.arrays = self.dir / "arrays.npz"
        self.arrays_partial = self.dir / "arrays.partial.npz"
        self.generate_lock = self.dir / _sharded_name("generate.lock", shard)
        self.run_lock = self.dir / "generate.lock"  # the whole run's lock (shards hold it shared)

    def shard_files(self, name: str) -> list[Path]:
        """The shard files of the run named like ``name`` (``run_meta.json`` -> ``run_meta.shard-*.json``)."""
        stem, rest = name.split(".", 1)
        return sorted((p for p in self.dir.glob(f"{stem}.shard-*-of-*.{rest}") if shard_of_file(p)),
                      key=lambda p: (shard_of_file(p).count, shard_of_file(p).index))


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
        raise _folder_error(path, "read it", exc) from None
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


def read_stored_config(paths: RunPaths) -> dict:
    """The run's ``config.json`` as stored; a corrupt or invalid file is a :class:`RunStoreError` naming it."""
    stored = read_run_json(paths.config)
    try:
        from_stored(stored, str(paths.config))
    except ValueError as exc:
        raise RunStoreError(paths.config, str(exc).removeprefix(f"{paths.config}: ")) from None
    return stored


def check_probe_owner(paths: RunPaths, cfg: RunConfig) -> None:
    """Refuse a run that borrows its probe (``probe_from``) from nothing that can own one.

    The owner is a run folder beside this run's (``<out root>/<probe_from>``) or, before that run
    has started, a registered setting (``settings/<probe_from>.yaml``); never the run itself. An owner
    that exists (its ``config.json``, else its setting) must generate a probe of its own
    (``probe_n`` > 0, no ``probe_from`` of its own) of the same task. The error is a
    :class:`RunStoreError` naming the run's folder and the field ``probe.from``.
    """
    owner = cfg.probe_from
    if not owner:
        return

    def refuse(problem: str) -> RunStoreError:
        return RunStoreError(paths.dir, f"field 'probe.from': {owner!r} {problem}")

    if owner == cfg.setting:
        raise refuse("is this run itself; a run that borrows its probe names the run that generates it")
    owner_paths = RunPaths(paths.dir.parent, owner)
    if owner_paths.config.exists():
        stored = from_stored(read_stored_config(owner_paths), str(owner_paths.config))
        source = str(owner_paths.config)
        task, probe_from, probe_n, split = stored.dataset, stored.probe_from, stored.probe_n, stored.probe_split
    else:
        setting_file = Path(SETTINGS_DIR) / f"{owner}.yaml"
        if not setting_file.is_file():
            raise refuse(f"names no run in {paths.dir.parent} (no {owner_paths.config}) and no setting "
                         f"(no {setting_file})")
        setting = load_config(setting_file)
        if setting["kind"] != "real":
            raise refuse(f"is a {setting['kind']} setting ({setting_file}); a probe is generated by a real one")
        source = str(setting_file)
        probe = setting["probe"]
        task, probe_from, probe_n, split = setting["task"], probe["from"], probe["n"], probe["split"]
    if probe_from:
        raise refuse(f"borrows its own probe from {probe_from!r} ({source}); name {probe_from!r}, the run that "
                     "generates it")
    if not probe_n or not split:
        raise refuse(f"has no probe of its own ({source}: probe n={probe_n}, split={split!r})")
    if task != cfg.dataset:
        raise refuse(f"is a run of task {task!r} ({source}), this run's task is {cfg.dataset!r}")


def check_config(paths: RunPaths, cfg: RunConfig) -> None:
    """Write config.json on the first run; on resume refuse a config whose protocol changed.

    Only the window lengths (``n``, ``probe_n``) and ``NON_PROTOCOL_KEYS`` may change; a changed
    window length is recorded. The error names the file and every field that differs. A borrowed
    probe's owner is checked first (:func:`check_probe_owner`).
    """
    check_probe_owner(paths, cfg)
    if not paths.config.exists():
        try:
            paths.dir.mkdir(parents=True, exist_ok=True)
            write_record_json(paths.config, cfg.to_json())
        except OSError as exc:
            raise _folder_error(paths.config, "write it", exc) from None
        return
    stored_raw = read_stored_config(paths)
    stored = from_stored(stored_raw, str(paths.config))
    diff = protocol_differences(stored, cfg)
    if diff:
        old, new = stored.to_json(), cfg.to_json()
        detail = "; ".join(f"'{k}': stored {old[k]!r}, requested {new[k]!r}" for k in diff)
        raise RunStoreError(paths.config, f"the requested run changes the protocol of the stored one ({detail}). "
                                          "Use another setting name or output root, or delete the folder to start "
                                          "over.")
    if any(stored_raw.get(k) != getattr(cfg, k) for k in WINDOW_KEYS):
        write_record_json(paths.config, {**stored_raw, **{k: getattr(cfg, k) for k in WINDOW_KEYS}})


# ---------------------------------------------------------------------------------------------
# The window of a part file and the one predicate that decides which records belong to it


@dataclass(frozen=True)
class Window:
    """The instances one part file of a run holds, and the shape of their records.

    ``kind`` is "trajectories" (records with ``rounds`` rounds of ``votes`` verifier outputs each)
    or "probe" (one plan with ``votes`` verifier outputs); ``split`` is None for a run without a
    probe of its own.
    """

    kind: str
    setting: str
    dataset: str
    split: str | None
    start: int
    n: int
    votes: int
    rounds: int | None = None
    shard: Shard | None = None

    @property
    def indices(self) -> list[int]:
        """The window's indices (the shard's share of them for a shard's window)."""
        return [i for i in range(self.start, self.start + self.n) if self.owns(i)]

    def owns(self, index: int) -> bool:
        """Whether ``index`` falls to this window's shard (always, for a whole window)."""
        return self.shard is None or self.shard.owns(index)

    @property
    def config_fields(self) -> tuple[str, str, str]:
        """The names of the window's split, start and length in ``config.json``."""
        return ("split", "start", "n") if self.kind == "trajectories" else ("probe_split", "probe_start", "probe_n")

    def describe(self) -> str:
        f_split, f_start, f_n = self.config_fields
        of_shard = f", shard {self.shard}" if self.shard else ""
        return (f"setting {self.setting!r} {self.kind} window ({self.dataset}, "
                f"{f_split}={self.split!r}, {f_start}={self.start}, {f_n}={self.n}{of_shard})")


def _dataset_name(cfg: RunConfig, dataset: str | None) -> str:
    if dataset is not None:
        return dataset
    from .tasks import get_task  # the task registry; imported here so reading records starts no task

    return get_task(cfg.dataset).dataset


def trajectory_window(cfg: RunConfig, dataset: str | None = None, shard: Shard | None = None) -> Window:
    """The trajectory window of a run (``shard``: that shard's share). ``dataset``: how records name
    the benchmark (the task's ``dataset``); looked up from ``cfg.dataset`` when not given."""
    return Window("trajectories", cfg.setting, _dataset_name(cfg, dataset), cfg.split, cfg.start, cfg.n,
                  votes=cfg.M, rounds=cfg.K_max + 1, shard=shard)


def probe_window(cfg: RunConfig, dataset: str | None = None, shard: Shard | None = None) -> Window:
    """The probe window whose records the run ``cfg`` stores itself (its own ``probe.part.jsonl``).

    A run that reuses another setting's probe (``probe_from``) or has none owns an empty window
    with ``split`` None: every record in its probe part file is foreign.
    """
    owns = bool(cfg.probe_split) and not cfg.probe_from
    return Window("probe", cfg.setting, _dataset_name(cfg, dataset), cfg.probe_split if owns else None,
                  cfg.probe_start, cfg.probe_n if owns else 0, votes=cfg.probe_votes, shard=shard)


IN_WINDOW, PAST_WINDOW, FOREIGN = "in window", "past the window", "foreign"


def window_membership(record: dict, window: Window) -> tuple[str, str]:
    """Where a record stands relative to a window, and why.

    ``(IN_WINDOW, "")``: an instance of the window (same setting, dataset and split; index in
    ``start .. start + n``). ``(PAST_WINDOW, why)``: an instance of the same run past the window's
    end, kept because the window may be extended. ``(FOREIGN, why)``: a record of another setting,
    dataset or split, one before the window's start, which belongs to no window of this run, or,
    in a shard's window, one whose index falls to another shard.
    """
    for field in ("setting", "dataset", "split"):
        if field not in record:
            return FOREIGN, f"field '{field}' missing (the run's is {getattr(window, field)!r})"
        if record[field] != getattr(window, field):
            return FOREIGN, f"field '{field}' is {record[field]!r}, the run's is {getattr(window, field)!r}"
    index = record.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        return FOREIGN, f"field 'index' is {index!r}, not an integer"
    if index < window.start:
        return FOREIGN, f"field 'index' is {index}, before the window start {window.config_fields[1]}={window.start}"
    if not window.owns(index):
        return FOREIGN, (f"field 'index' is {index}, which falls to shard {index % window.shard.count}/"
                         f"{window.shard.count}, not to this shard {window.shard}")
    if index >= window.start + window.n:
        return PAST_WINDOW, f"index {index} is past the window's end ({window.start + window.n})"
    return IN_WINDOW, ""


def in_window(record: dict, window: Window) -> bool:
    """Whether ``record`` is one of the window's instances (:func:`window_membership`)."""
    return window_membership(record, window)[0] == IN_WINDOW


def _outputs_problem(outputs, votes: int, where: str) -> str:
    if not isinstance(outputs, list):
        return f"field '{where}judge' is {type(outputs).__name__}, not a list of verifier outputs"
    if len(outputs) != votes:
        return f"field '{where}judge' has {len(outputs)} verifier outputs, the run's M is {votes}"
    for m, text in enumerate(outputs):
        if not isinstance(text, str):
            return f"field '{where}judge[{m}]' is {type(text).__name__}, not a string"
    return ""


def record_shape_problem(record: dict, window: Window) -> str:
    """The first field in which a record differs from the shape of the window's records ('' when none).

    A trajectory record has ``window.rounds`` rounds, round ``k`` at position ``k``, each with a
    string ``plan`` and ``window.votes`` string verifier outputs; a probe record has one string
    ``plan`` and ``window.votes`` string outputs. This is what labeling reads.
    """
    if window.kind == "probe":
        if not isinstance(record.get("plan"), str):
            return f"field 'plan' is {type(record.get('plan')).__name__}, not a string"
        return _outputs_problem(record.get("judge"), window.votes, "")
    rounds = record.get("rounds")
    if not isinstance(rounds, list):
        return "field 'rounds' missing" if rounds is None else f"field 'rounds' is {type(rounds).__name__}, not a list"
    if len(rounds) != window.rounds:
        return f"field 'rounds' has {len(rounds)} rounds, the run's K_max + 1 is {window.rounds}"
    for k, rd in enumerate(rounds):
        if not isinstance(rd, dict):
            return f"field 'rounds[{k}]' is {type(rd).__name__}, not an object"
        if rd.get("k") != k:
            return f"field 'rounds[{k}].k' is {rd.get('k')!r}, expected {k}"
        if not isinstance(rd.get("plan"), str):
            return f"field 'rounds[{k}].plan' is {type(rd.get('plan')).__name__}, not a string"
        problem = _outputs_problem(rd.get("judge"), window.votes, f"rounds[{k}].")
        if problem:
            return problem
    return ""


# the setting's fields (vrr.settings) of a window's start and length, by their config.json names
SETTING_FIELDS = {"start": "window.start", "n": "window.N", "probe_start": "probe.start", "probe_n": "probe.n"}


def check_window_fits(window: Window, dataset_size: int) -> None:
    """Refuse a window that ends past the end of its split (it could never complete): a
    :class:`WindowError` naming the setting's field, its start when the window starts past the end,
    else its length."""
    if window.n > 0 and window.start + window.n > dataset_size:
        f_split, f_start, f_n = window.config_fields
        field = SETTING_FIELDS[f_start if window.start >= dataset_size else f_n]
        raise WindowError(f"setting {window.setting!r}: field '{field}': the {window.kind} window "
                          f"{f_split}={window.split!r} {f_start}={window.start} {f_n}={window.n} ends at index "
                          f"{window.start + window.n - 1}, past the end of {window.dataset} {window.split} "
                          f"({dataset_size} problems, indices 0..{dataset_size - 1})")


# ---------------------------------------------------------------------------------------------
# Part files


class PartFileWarning(UserWarning):
    """A part file had lines that are not records of its run; they were set aside, not lost."""


def _parse_line(line: bytes) -> tuple[dict | None, str]:
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg})"
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
    return (json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n").encode()


def read_rejected(part: Path) -> list[dict]:
    """The lines set aside from ``part``: dicts with ``source``, ``line``, ``reason`` and ``raw``
    (the line's exact bytes)."""
    path = rejected_path(part)
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            entry = json.loads(line)
            entry["raw"] = base64.b64decode(entry["base64"]) if "base64" in entry else entry["text"].encode()
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


def _part_kind(path: Path) -> str | None:
    """"trajectories" / "probe" for a run's part file (a shard's included), else None."""
    shard = shard_of_file(path)
    for kind, name in (("trajectories", TRAJ_PART_NAME), ("probe", PROBE_PART_NAME)):
        if Path(path).name == _sharded_name(name, shard):
            return kind
    return None


def part_window(path: Path) -> Window | None:
    """The window of a run's part file (a shard's file: that shard's window), from the ``config.json``
    beside it (None for a file that is not a run's part file or has no config beside it)."""
    paths = RunPaths(path.parent.parent, path.parent.name)
    kind = _part_kind(path)
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


def sibling_parts(path: Path) -> list[Path]:
    """The other part files of the same kind in a run's folder: the run's own and every shard's."""
    kind = _part_kind(path)
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
    what = {"trajectories": "trajectories", "probe": "probe plans"}.get(_part_kind(part), "instances")
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


# ---------------------------------------------------------------------------------------------
# The run lock


def _lock_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return f"pid {holder['pid']} on host {holder['host']} since {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not recorded itself yet"


@contextmanager
def run_lock(lock_path: Path) -> Iterator[dict]:
    """Hold an exclusive ``fcntl.flock`` on ``lock_path`` for the length of the block.

    The holder's pid, host and start time are written into the file. When another process holds
    the lock, a :class:`RunLockedError` naming that holder is raised at once (no waiting). The
    kernel releases the lock when the holder exits, however it exits. ``lock_path`` is a parameter
    so that parts of a run (one lock per shard) can be locked separately.
    """
    busy = ("another generator is writing {dir}. Wait for it to finish or stop it; two generators on one run "
            "would both run the whole window.")
    with _flock(lock_path, fcntl.LOCK_EX, busy) as fd:
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)
        os.fsync(fd)
        try:
            yield holder
        finally:
            os.ftruncate(fd, 0)  # the file is left in place: unlinking a flock file races with a new holder


@contextmanager
def _flock(lock_path: Path, mode: int, busy: str) -> Iterator[int]:
    """``flock(mode)`` on ``lock_path`` without waiting, for the block; held by another process, a
    :class:`RunLockedError` naming the holder, followed by ``busy`` (``{dir}``: the run's folder)."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise _folder_error(lock_path, "create the run's lock", exc) from None
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLockedError(lock_path, f"the run is locked by {_lock_holder(fd)}: "
                                            + busy.format(dir=lock_path.parent)) from None
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _shared_lock(lock_path: Path) -> Iterator[int]:
    """A shared ``flock`` on the run's lock: shards run side by side, a whole-run generator waits for none."""
    with _flock(lock_path, fcntl.LOCK_SH, "a generator of the whole window; a shard would run instances it runs "
                                          "too. Wait for it to finish or stop it.") as fd:
        yield fd


@contextmanager
def generation_lock(paths: RunPaths) -> Iterator[dict]:
    """The locks a generator holds for its session: the run's lock, exclusively for a whole-window
    run; for a shard, the run's lock shared (shards run side by side; a whole-window run is refused
    while any runs) and the shard's own lock exclusively. A shard of another split of the same run (``j/m`` with another
    ``m``) that is running is refused: its share overlaps this one's."""
    if paths.shard is None:
        with ExitStack() as stack:
            try:
                holder = stack.enter_context(run_lock(paths.run_lock))
            except RunLockedError as exc:
                running = _running_shards(paths)
                if running:
                    raise RunLockedError(paths.run_lock, f"shards {', '.join(running)} of this run are "
                                                         "running; a whole-window generator would run their "
                                                         "instances too. Wait for them or stop them.") from None
                raise exc
            yield holder
        return
    with _shared_lock(paths.run_lock), run_lock(paths.generate_lock) as holder:
        other = [s for s in _running_shards(paths) if Shard.parse(s).count != paths.shard.count]
        if other:
            raise RunLockedError(paths.generate_lock, f"shards {', '.join(other)} of another split of this run are "
                                                      f"running; shard {paths.shard} would overlap them. Use "
                                                      "the same number of shards, or wait for them.")
        yield holder


def _running_shards(paths: RunPaths) -> list[str]:
    """The shards of the run whose lock another process holds now ("i/n")."""
    running = []
    for lock in paths.shard_files("generate.lock"):
        if paths.shard is not None and lock == paths.generate_lock:
            continue
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            running.append(str(shard_of_file(lock)))
        finally:
            os.close(fd)
    return running


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


def update_meta(paths: RunPaths, cfg: RunConfig, engine_desc: dict, session: dict) -> None:
    """Record the engine and this session's counts and timings in ``run_meta.json`` (a shard's in its own)."""
    meta = _read_meta_file(paths.meta) or {"sessions": []}
    meta["engine"] = engine_desc
    meta["config"] = cfg.to_json()
    sessions = [s for s in meta.get("sessions", []) if s.get("id") != session["id"]]
    sessions.append(session)
    meta["sessions"] = sessions
    meta["total_seconds"] = round(sum(s.get("seconds", 0.0) for s in sessions), 1)
    write_record_json(paths.meta, meta)


_SESSION_NUMBER = itertools.count()


def new_session() -> dict:
    # the per-process number keeps two sessions of one process in one second apart (update_meta keys on the id)
    return {"id": f"{int(time.time())}-{os.getpid()}-{next(_SESSION_NUMBER)}", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "instances": 0, "probe_plans": 0, "seconds": 0.0}


def batch_time(records: list[dict]) -> tuple[float, int]:
    """Engine-batch seconds spent on these records (each batch counted once: records of one batch share
    its ``batch`` id and ``batch_seconds``) and the number of records."""
    batches = {(r.get("batch"), r.get("batch_seconds")) for r in records if r.get("batch_seconds") is not None}
    return float(sum(sec for _, sec in batches)), len(records)


MACHINE_KIND_FIELDS = ("backend", "cpu_kind", "dtype")


def machine_kind(machine: dict | None) -> tuple:
    """The key that groups a session's machine record into a machine kind: (backend, CPU kind, dtype),
    ``None`` where the session did not record a field. A session row or a :func:`session_machines` row works."""
    machine = machine or {}
    return tuple(machine.get(k) for k in MACHINE_KIND_FIELDS)


def session_machines(meta: dict) -> list[dict]:
    """The machines a run's sessions ran on (backend, CPU kind, dtype; ``None`` where a session did not record
    it), each with the instances, probe plans and seconds generated there, in order of first use: a window
    resumed on another machine kind spans several, and its figures name each."""
    out: dict[tuple, dict] = {}
    for s in meta.get("sessions", []):
        key = machine_kind(s.get("machine"))
        row = out.setdefault(key, {**dict(zip(MACHINE_KIND_FIELDS, key)), "instances": 0, "probe_plans": 0,
                                   "seconds": 0.0})
        row["instances"] += s.get("instances", 0)
        row["probe_plans"] += s.get("probe_plans", 0)
        row["seconds"] = round(row["seconds"] + s.get("seconds", 0.0), 1)
    return list(out.values())


def run_cost(meta: dict, records: dict[str, list[dict]] | None = None) -> dict:
    """Wall time and throughput of a setting's generation from its ``run_meta.json`` sessions.

    Sessions that ran only trajectories (only probe plans) give the per-instance (per-plan) cost;
    engine load time is counted in ``wall_seconds`` but not in the per-item costs. ``records``
    (``{"traj": [...], "probe": [...]}``, the stored records) gives the per-item costs from the batch
    times instead, which also works for sessions that ran both phases.
    """
    sessions = meta.get("sessions", [])
    tot = {"sessions": len(sessions), "instances": 0, "probe_plans": 0, "seconds": 0.0,
           "load_seconds": 0.0, "generated_tokens": 0, "prompt_tokens": 0}
    traj_s = traj_n = probe_s = probe_n = 0.0
    for s in sessions:
        st = s.get("engine_stats") or {}
        tot["instances"] += s.get("instances", 0)
        tot["probe_plans"] += s.get("probe_plans", 0)
        tot["seconds"] += s.get("seconds", 0.0)
        tot["load_seconds"] += s.get("engine_load_seconds", 0.0)
        tot["generated_tokens"] += st.get("generated_tokens", 0)
        tot["prompt_tokens"] += st.get("prompt_tokens", 0)
        if s.get("instances") and not s.get("probe_plans"):
            traj_s, traj_n = traj_s + s.get("seconds", 0.0), traj_n + s["instances"]
        elif s.get("probe_plans") and not s.get("instances"):
            probe_s, probe_n = probe_s + s.get("seconds", 0.0), probe_n + s["probe_plans"]
    tot["wall_seconds"] = tot["seconds"] + tot["load_seconds"]
    # engine_stats are written at the end of a session: a killed session has seconds but no tokens
    timed = sum(s.get("seconds", 0.0) for s in sessions if s.get("engine_stats"))
    tot["generated_tok_per_s"] = tot["generated_tokens"] / timed if timed else float("nan")
    for phase, rows in (records or {}).items():
        sec, n = batch_time(rows)
        if phase == "traj" and n:
            traj_s, traj_n = sec, n
        elif phase == "probe" and n:
            probe_s, probe_n = sec, n
    tot["seconds_per_instance"] = traj_s / traj_n if traj_n else float("nan")
    tot["seconds_per_probe_plan"] = probe_s / probe_n if probe_n else float("nan")
    return tot


def _read_meta_file(path: Path) -> dict:
    if not path.exists():
        return {}
    meta = read_run_json(path)
    sessions = meta.get("sessions", [])
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise RunStoreError(path, "field 'sessions' is not a list of session objects")
    return meta


def read_run_meta(paths: RunPaths) -> dict:
    """The run's ``run_meta.json`` ({} before the first session); a corrupt file is a
    :class:`RunStoreError` naming it.

    For the whole run (``paths.shard`` None) the shards' run metas are merged in: their sessions
    (each marked with its ``shard``) follow the run's own, ``total_seconds`` counts them all, and the
    engine and config are the run's own, else the first shard's. A shard's paths read its own file.
    """
    meta = _read_meta_file(paths.meta)
    if paths.shard is not None:
        return meta
    for path in paths.shard_files("run_meta.json"):
        part = _read_meta_file(path)
        for key in ("engine", "config"):
            if key in part and key not in meta:
                meta[key] = part[key]
        shard = str(shard_of_file(path))
        meta["sessions"] = meta.get("sessions", []) + [{**s, "shard": shard} for s in part.get("sessions", [])]
    if meta.get("sessions"):
        meta["total_seconds"] = round(sum(s.get("seconds", 0.0) for s in meta["sessions"]), 1)
    return meta
