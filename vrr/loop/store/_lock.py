"""The run lock: the ``fcntl.flock`` on ``generate.lock`` a generator holds for its whole session.

The lock file names its holder (pid, host, start time). A whole-window generator holds the run's lock
exclusively; a shard holds it shared and its own shard lock exclusively, so shards of one split run side
by side while a whole-window run, or a shard of another split, is refused at once.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
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
        _note_stale_holder(lock_path, fd)
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)
        os.fsync(fd)
        try:
            yield holder
        finally:
            os.ftruncate(fd, 0)  # the file is left in place: unlinking a flock file races with a new holder


def _note_stale_holder(lock_path: Path, fd: int) -> str:
    """Say so (stderr) when the lock we now hold still names a holder: that process stopped without releasing
    it (a SIGKILL gives it no chance; the kernel freed its ``flock``). Its record is replaced by ours. Returns
    the line said ("" when the file was empty)."""
    if not os.pread(fd, 1, 0):
        return ""
    line = (f"{lock_path}: the previous holder, {_lock_holder(fd)}, stopped without releasing the run's lock "
            "(killed); the kernel released it, and this session takes it")
    print(line, file=sys.stderr, flush=True)
    return line


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
    ``m``) that is running is refused: its share overlaps this one's.

    A session that creates the run's folder and stops with an error before it stores a record (a refused
    model, an engine that does not start, a window past its dataset) leaves no folder behind (an
    interrupt is not an error: Ctrl-C keeps the folder, as a kill would): its
    ``config.json`` and locks are removed with the folder (and the out root's folders it created), unless
    another generator of the run (a shard) holds the run's lock."""
    created = _folders_to_create(paths.dir)
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
            try:
                yield holder
            except Exception:  # an error, not an interrupt: a stopped run keeps its folder
                if created:
                    _discard_unwritten_run(paths, created)
                raise
        return
    with _shared_lock(paths.run_lock) as run_fd, run_lock(paths.generate_lock) as holder:
        other = [s for s in _running_shards(paths) if Shard.parse(s).count != paths.shard.count]
        if other:
            raise RunLockedError(paths.generate_lock, f"shards {', '.join(other)} of another split of this run are "
                                                      f"running; shard {paths.shard} would overlap them. Use "
                                                      "the same number of shards, or wait for them.")
        try:
            yield holder
        except Exception:  # an error, not an interrupt: a stopped run keeps its folder
            if created and _alone(run_fd):
                _discard_unwritten_run(paths, created)
            raise


# what a session writes into a new run's folder before its first record: the config and the locks
_UNWRITTEN_RUN = re.compile(r"config\.json|generate(\.shard-\d+-of-\d+)?\.lock")


def _folders_to_create(folder: Path) -> list[Path]:
    """``folder`` and those of its ancestors that do not exist yet (deepest first); [] when it exists."""
    missing = []
    for path in (folder, *folder.parents):
        try:
            if path.exists():
                break
        except OSError:
            break
        missing.append(path)
    return missing


def _alone(run_fd: int) -> bool:
    """Whether no other generator holds the run's lock: our shared lock becomes exclusive, or, when another
    process holds it, False (the lock may then be lost; the caller is leaving)."""
    try:
        fcntl.flock(run_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _discard_unwritten_run(paths: RunPaths, created: list[Path]) -> None:
    """Remove a run folder this session created and that holds nothing but its config and locks, then the
    ancestors the session created, while they are empty. Anything else in the folder keeps it all."""
    try:
        files = list(paths.dir.iterdir())
    except OSError:
        return
    if not all(f.is_file() and _UNWRITTEN_RUN.fullmatch(f.name) for f in files):
        return
    for f in files:
        f.unlink(missing_ok=True)
    for folder in created:
        try:
            folder.rmdir()
        except OSError:  # not empty (another run appeared beside it), or not ours to remove
            return


def _running_shards(paths: RunPaths) -> list[str]:
    """The shards of the run whose lock another process holds now ("i/n")."""
    running = []
    for lock in paths.shard_files("generate.lock"):
        if paths.shard is not None and lock == paths.generate_lock:
            continue
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:  # its holder finished and removed it since the listing: not running
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            running.append(str(shard_of_file(lock)))
        finally:
            os.close(fd)
    return running
