"""The one ``.npz`` writer: atomic, and byte-identical for identical arrays.

``numpy.savez_compressed`` stamps every member with the current time, so two runs that compute the
same arrays write different bytes; here every member carries a fixed timestamp.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from .atomic import atomic_write

_EPOCH = (1980, 1, 1, 0, 0, 0)


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` as a compressed ``.npz`` (readable by ``numpy.load``) atomically."""
    def write(fh):
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            for name, value in arrays.items():
                info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                with zf.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)

    return atomic_write(path, write, binary=True)


class NpzFormatError(ValueError):
    """A file is not a well-formed ``.npz``; ``member`` names the offending array (or ``<file>``)."""

    def __init__(self, path, member: str, problem: str):
        self.path, self.member, self.problem = str(path), member, problem
        super().__init__(f"{path}: field '{member}': {problem}")


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
MAX_MEMBER_BYTES = 1 << 30  # one uncompressed array; a setting's arrays are a few hundred kilobytes


def read_npz(path: str | os.PathLike, max_member_bytes: int = MAX_MEMBER_BYTES) -> dict[str, np.ndarray]:
    """Read every array of a ``.npz`` (``allow_pickle=False``); errors name the file and the member.

    Refused: a file that is not a zip (a bare ``.npy`` saved under a ``.npz`` name included), two
    members with the same array name (``S.npy`` twice, or ``S`` and ``S.npy``: ``numpy.load`` would
    keep one silently), members in folders or not ``.npy``, and members larger than
    ``max_member_bytes`` once uncompressed (checked before they are read).
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise NpzFormatError(path, "<file>", f"unreadable ({type(exc).__name__}: {exc})") from exc
    if head.startswith(b"\x93NUMPY"):
        raise NpzFormatError(path, "<file>", "is a single .npy array, not a .npz archive of named arrays")
    if not head.startswith(_ZIP_MAGIC):
        raise NpzFormatError(path, "<file>", "not a .npz archive (no zip header)")
    try:
        zf = zipfile.ZipFile(path)
    except Exception as exc:  # noqa: BLE001 - any failure to open the zip is the file's fault
        raise NpzFormatError(path, "<file>", f"not a readable .npz archive ({type(exc).__name__}: {exc})") from exc
    out: dict[str, np.ndarray] = {}
    with zf:
        infos = zf.infolist()
        seen: dict[str, str] = {}
        for info in infos:
            member = info.filename
            name = member[:-4] if member.endswith(".npy") else member
            if name in seen:
                raise NpzFormatError(path, name, f"appears twice in the archive ({seen[name]!r} and {member!r}); "
                                     "a reader would keep only one")
            seen[name] = member
            if "/" in member or "\\" in member or not member.endswith(".npy"):
                raise NpzFormatError(path, name[:80], f"member {member[:80]!r} is not a top-level .npy array")
            if info.file_size > max_member_bytes:
                raise NpzFormatError(path, name, f"{info.file_size} bytes uncompressed, more than {max_member_bytes}")
        for info in infos:
            name = info.filename[:-4]
            try:  # a corrupt member fails here (CRC, zlib, header)
                with zf.open(info) as fh:
                    out[name] = np.lib.format.read_array(fh, allow_pickle=False)
            except Exception as exc:  # noqa: BLE001
                raise NpzFormatError(path, name, f"unreadable ({type(exc).__name__}: {exc})") from exc
    return out
