"""The trajectory store: the files of one run under ``data/real/<setting>/``.

Problem texts are never stored: problems are referred to by dataset, split and index, and
perturbations by their spec (``vrr.loop.sandbox.redact_record`` removes verbatim restatements).

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
read back (:func:`read_run_meta`) holds every shard's sessions, and finalizing writes it into the run's
own ``run_meta.json`` (:func:`merge_run_meta`).

The readers (:func:`read_run_meta`, :func:`read_stored_config`, :func:`read_window`,
:func:`stored_window`) take a run as :class:`RunPaths` or as its folder's path, e.g.
``read_run_meta("data/real/gsm8k_cpu_favorable")``; a path that is not a run folder is a
:class:`RunStoreError` naming it (:func:`run_paths`).

The label step reads a run's window once, as one value (:func:`read_window` gives a
:class:`StoredWindow`: the records, the config and the paths), and works on it; ``python -m vrr status``
reads one the same way, without repairing (:func:`stored_window`).

Each concern is a private module, and this face exports the public names: ``_errors`` (the errors),
``_shard`` (a shard's share), ``_paths`` (the files of a run), ``_files`` (their formats), ``_config``
(``config.json``), ``_window`` (the window predicate), ``_records`` (a part file read, validated and
repaired), ``_merge`` (a window across every part file), ``_run_window`` (the window as one value),
``_lock`` (the run lock), ``_meta`` (``run_meta.json``) and ``_cost`` (a run's cost).
"""
from ._config import check_config, check_probe_owner, read_stored_config
from ._cost import MACHINE_KIND_FIELDS, batch_time, machine_kind, run_cost, session_machines
from ._errors import IncompleteWindowError, RunLockedError, RunStoreError, WindowError, folder_problem
from ._files import append_records, read_jsonl_gz, read_run_json, unique_by_index, write_jsonl_gz, write_record_json
from ._lock import generation_lock, run_lock
from ._merge import index_ranges, missing_instances, read_window_records, sibling_parts
from ._meta import merge_run_meta, new_session, read_run_meta, update_meta
from ._paths import DEFAULT_OUT_ROOT, PROBE_PART_NAME, TRAJ_PART_NAME, RunPaths, run_paths
from ._records import PartFileWarning, part_window, read_part, read_records, read_rejected, rejected_path
from ._run_window import StoredWindow, read_window, stored_window
from ._shard import MAX_SHARDS, Shard, shard_of_file
from ._window import (FOREIGN, IN_WINDOW, PAST_WINDOW, SETTING_FIELDS, Window, check_window_fits, in_window,
                      probe_window, record_shape_problem, trajectory_window, window_membership)

__all__ = [
    # errors
    "RunStoreError", "RunLockedError", "IncompleteWindowError", "WindowError", "folder_problem",
    # the files of a run, a shard's share and the formats
    "DEFAULT_OUT_ROOT", "TRAJ_PART_NAME", "PROBE_PART_NAME", "RunPaths", "run_paths", "MAX_SHARDS", "Shard", "shard_of_file",
    "write_record_json", "read_run_json", "append_records", "write_jsonl_gz", "read_jsonl_gz", "unique_by_index",
    # config.json
    "read_stored_config", "check_probe_owner", "check_config",
    # the window predicate
    "Window", "trajectory_window", "probe_window", "IN_WINDOW", "PAST_WINDOW", "FOREIGN", "window_membership",
    "in_window", "record_shape_problem", "SETTING_FIELDS", "check_window_fits",
    # part files: read, validate, set aside; merged across shards
    "PartFileWarning", "rejected_path", "read_rejected", "read_records", "part_window", "read_part",
    "sibling_parts", "read_window_records", "index_ranges", "missing_instances",
    # the window as one value
    "StoredWindow", "stored_window", "read_window",
    # the run lock
    "run_lock", "generation_lock",
    # run meta and cost
    "update_meta", "new_session", "read_run_meta", "merge_run_meta", "batch_time", "MACHINE_KIND_FIELDS", "machine_kind",
    "session_machines", "run_cost",
]
