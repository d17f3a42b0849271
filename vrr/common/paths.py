"""Where the repository, its settings and the shared datasets live."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DIR = REPO_ROOT / "settings"
SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data"  # beside the clone: <repo>/../shared/data


def shared_data_dirs(dataset: str, env_var: str | None = None) -> list[Path]:
    """Candidate local folders of a benchmark: ``$<env_var>`` (e.g. ``VRR_GSM8K_DIR``) when set, then
    ``../shared/data/<dataset>`` beside the clone. Nothing else: no absolute fallback outside the clone."""
    out = []
    if env_var and os.environ.get(env_var):
        out.append(Path(os.environ[env_var]))
    out.append(SHARED_DATA_DIR / dataset)
    return out
