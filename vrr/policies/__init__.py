"""Stopping policies (App. A, Algorithm 1), vectorized over instances, and their replay over frozen
trajectories under cross-fitting (Sec. 5.1); the online controller that runs them inside a live loop, one round
(or one vote) at a time. ``reference`` holds literal per-instance versions for tests.
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
    vrr_stop_t,
    vrr_guard,
    hindsight_best,
    algorithm1,
    stop_commits,
    algorithm1_step,
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
    EXTRA_POLICIES,
    algorithm1_inputs,
    controller_parameters,
)
from .online import OnlineController, Decision, ControllerStateError  # noqa: F401
from .sequential import run_controller, fold_controllers, vote_orders, ControllerRun  # noqa: F401
from . import reference  # noqa: F401
