"""Where the repository, its settings and the shared datasets live."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DIR = REPO_ROOT / "settings"


def shared_data_dirs(dataset: str, env_var: str | None = None) -> list[Path]:
    """Candidate local folders of a benchmark: ``$<env_var>``, then ``../shared/data/<dataset>``
    beside the clone, then ``shared/data/<dataset>`` inside it, then ``/work/shared/data/<dataset>``."""
    out = []
    if env_var and os.environ.get(env_var):
        out.append(Path(os.environ[env_var]))
    out += [REPO_ROOT.parent / "shared" / "data" / dataset, REPO_ROOT / "shared" / "data" / dataset,
            Path("/work/shared/data") / dataset]
    return out
