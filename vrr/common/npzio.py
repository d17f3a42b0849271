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
