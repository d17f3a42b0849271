"""The errors of the run store, and what stands in the way of a run folder.

:class:`RunStoreError` names the file of a run that is unreadable or inconsistent; :class:`RunLockedError`
(another process holds the run's lock) and :class:`IncompleteWindowError` (a window lacks instances) are
kinds of it. :class:`WindowError` refuses a window that ends past its dataset. :func:`folder_problem` and
:func:`folder_error` say why a run folder cannot be read or written (an ancestor that is a file, one that
cannot be written).
"""
from __future__ import annotations

import os
from pathlib import Path


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


def folder_error(path: Path, action: str, exc: OSError) -> RunStoreError:
    """A :class:`RunStoreError` for an ``OSError`` met while ``action`` in a run folder (the out root
    is a file, the folder cannot be written, ...); it names the path and what is in the way."""
    why = folder_problem(path.parent) or f"{exc.strerror or type(exc).__name__}"
    return RunStoreError(path, f"cannot {action}: {why} (the run folder is <out root>/<run name>: "
                               "check --out-root)")
