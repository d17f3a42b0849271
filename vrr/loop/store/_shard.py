"""A shard of a run's window: which instances fall to it, and how its files are tagged.

Shard ``i`` of ``n`` (:class:`Shard`, ``python -m vrr generate SETTING --shard i/n``) holds the indices
``index % n == i``, so the split depends neither on the window's start nor on its length. A shard's files
carry its tag in their names (``*.shard-i-of-n.*``); :func:`shard_of_file` reads it back.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
