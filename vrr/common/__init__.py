"""Shared helpers used by every stage of the flow: atomic writes, JSON files, repository paths.

Nothing here knows about the paper; it imports no other part of ``vrr``.
"""
from .atomic import atomic_write, atomic_write_bytes
from .jsonio import json_default, read_json, write_json
from .npzio import write_npz
from .paths import REPO_ROOT, SETTINGS_DIR, shared_data_dirs

__all__ = ["REPO_ROOT", "SETTINGS_DIR", "atomic_write", "atomic_write_bytes", "read_json", "shared_data_dirs",
           "json_default", "write_json", "write_npz"]
