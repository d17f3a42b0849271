"""The run lock: the ``fcntl.flock`` on ``generate.lock`` a generator holds for its whole session.

The lock file names its holder (pid, host, start time). A whole-window generator holds the run's lock
exclusively; a shard holds it shared and its own shard lock exclusively, so shards of one split run side
by side while a whole-window run, or a shard of another split, is refused at once.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from ._errors import RunLockedError, folder_error
from ._paths import RunPaths
from ._shard import Shard, shard_of_file


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
        raise folder_error(lock_path, "create the run's lock", exc) from None
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
