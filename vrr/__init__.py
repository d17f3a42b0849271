"""vrr: reference implementation of "Verify, Repair, Repeat, or Stop?" (VRR-Stop / VRR-Guard).

``import vrr`` is the public API: every name below is importable from the top level, and the docstring
of each one that implements part of the paper cites it (``docs/api.md`` lists them). Names
are resolved on first use, so ``import vrr`` stays light and never imports vLLM or matplotlib.

The package is laid out as the paper's flow; each subpackage imports only from itself and those above it
(``tests/test_architecture.py`` checks it):

=============  ==========================================================================
subpackage     what lives there
=============  ==========================================================================
``common``     atomic writes, the JSON reader/writer, repository paths
``core``       noise model, J, Q_t, A_t (Sec. 3); belief Eq. 5, predict, gain Eq. 6, b* Eq. 7;
               keep-best Eq. 9, Lemma 1 tails and bounds
``settings``   the setting YAML: the whole protocol of a run (schema, ``include:``, checks)
``data``       the data contract (one ``.npz`` per setting) and the simulator that writes it
``loop``       the LLM verify-repair loop: engines, tasks, verifiers, the runner, the trajectory store
``label``      text trajectories -> labeled arrays of the data contract
``calibration``  EM / MoM / labeled MLE / BB-EM, alpha, beta, pi, cross-fitting (App. A, B, E, I);
               error radius B_k, Eq. 8, Prop. 1, labeled J test, flip-risk grid
``policies``   baselines, VRR-Stop, VRR-Guard, Algorithm 1, TPM, hindsight (App. A); replay;
               the online controller for live loops, with sequential voting
``stats``      bootstrap, paired bootstrap, McNemar (App. G); loop dynamics, ablations (App. C, I)
``report``     the paper's tables and figures, the results index
``chain``      the step functions the notebooks call (paths, 01 generate)
=============  ==========================================================================
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_API: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for name in names:
        _API[name] = module


_export("vrr.core.model", "NoiseParams", "youden_j", "population_step", "population_dynamics", "acceptance_rate",
        "population_fixed_point", "class_accept_rates")
_export("vrr.core.belief", "vote_log_likelihoods", "belief_update", "predict", "gain", "boundary", "should_repair",
        "filter_beliefs")
_export("vrr.core.guard", "keep_best", "keep_best_step", "replacement_tail_exact", "hoeffding_bound", "union_bound", "union_bound_exact")
_export("vrr.settings", "load_config", "list_settings", "SettingConfigError")
_export("vrr.data.contract", "Setting", "DataContractError", "load_setting", "save_setting")
_export("vrr.data.simulate", "simulate_setting", "simulate_from_config", "perturbation_schedule")
_export("vrr.calibration.estimators", "binomial_mixture_em", "method_of_moments", "labeled_mle", "beta_binomial_em",
        "fit_vote_noise", "transition_rates", "calibrate", "crossfit", "crossfit_folds", "CrossFit", "Calibration",
        "EstimatorOptions")
_export("vrr.calibration.identifiability", "parameter_intervals", "crossfit_intervals", "error_radius",
        "sign_identifiable", "labeled_j_diagnostic", "flip_risk_grid", "radius_grid")
_export("vrr.calibration.round_dynamics", "RoundRates", "round_rates", "crossfit_round_rates", "shrinkage_strength")
_export("vrr.policies.rules", "PolicyOutcome", "no_repair", "fixed_k", "majority_stop", "conf_stop",
        "accepted_first", "last_accepted", "verifier_best", "vrr_stop", "vrr_stop_t", "vrr_guard", "hindsight_best",
        "algorithm1", "stop_commits", "algorithm1_step")
_export("vrr.policies.replay", "ReplayConfig", "ReplayResult", "replay", "fit_calibration", "save_replay", "load_replay",
        "load_calibration", "TPM", "algorithm1_inputs", "controller_parameters")
_export("vrr.policies.online", "OnlineController", "Decision", "ControllerStateError", "UnknownOptionError")
_export("vrr.policies.sequential", "run_controller", "fold_controllers", "vote_orders", "ControllerRun")
_export("vrr.stats.inference", "bootstrap_ci", "paired_bootstrap", "mcnemar_exact", "bootstrap_means",
        "policy_table")
_export("vrr.stats.analysis", "loop_dynamics", "damage_statistics", "calibration_summary", "summarize_replay", "setting_statistics", "findings_markdown", "paired_comparisons")
_export("vrr.common.jsonio", "read_json", "write_json")
_export("vrr.chain", "setting_paths", "generate", "calibration_record", "SettingPaths")
_export("vrr.loop.config", "RunConfig", "run_config")
_export("vrr.label.labeling", "relabel")

_SUBMODULES = ("common", "core", "settings", "data", "loop", "label", "calibration", "policies", "stats", "report",
               "chain")

__all__ = sorted(_API) + ["example_calibration"] + list(_SUBMODULES)


def example_calibration() -> str:
    """The path of the example calibration shipped with the package (``vrr/examples/calibration_small.json``:
    ``from_labeled`` on 150 simulated loops, ``docs/online.md``), for ``OnlineController.from_calibration`` in
    any install, from any working directory."""
    from importlib.resources import files

    return str(files("vrr") / "examples" / "calibration_small.json")


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"vrr.{name}")
    raise AttributeError(f"module 'vrr' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
