"""Statistics of replayed outcomes (App. G: bootstrap, paired bootstrap, McNemar) and the per-setting
analyses behind notebooks 02-05 (loop dynamics, damage, ablations of App. I).
"""
from .inference import (  # noqa: F401
    N_RESAMPLES,
    Interval,
    bootstrap_ci,
    paired_bootstrap,
    mcnemar_exact,
    bootstrap_means,
    percentile_interval,
    policy_table,
)
from .analysis import (  # noqa: F401
    summarize_replay,
    trajectory_shape,
    loop_dynamics,
    initial_vote_counts,
    damage_statistics,
    calibration_summary,
    PAIRED_COMPARISONS,
    paired_comparisons,
    round_vs_round,
    round_changes,
    delta_sweep,
    n_calib_sweep,
    calibration_input_sweep,
    median_decision_margin,
    findings_markdown,
    setting_statistics,
)
from .calibration_ablation import setting_calibration_ablation  # noqa: F401
