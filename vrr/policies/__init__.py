"""Stopping policies (App. A, Algorithm 1), vectorized over instances, and their replay over frozen
trajectories under cross-fitting (Sec. 5.1). ``reference`` holds literal per-instance versions for tests.
"""
from .rules import (  # noqa: F401
    PolicyOutcome,
    no_repair,
    fixed_k,
    majority_stop,
    conf_stop,
    accepted_first,
    last_accepted,
    verifier_best,
    vrr_stop,
    vrr_guard,
    hindsight_best,
    algorithm1,
)
from .replay import (  # noqa: F401
    TPM,
    ReplayConfig,
    ReplayResult,
    DEFAULT_POLICIES,
    replay,
    save_replay,
    load_replay,
    fit_calibration,
    load_calibration,
    CALIBRATION_FIELDS,
)
from . import reference  # noqa: F401
