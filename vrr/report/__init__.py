"""The paper's tables and figures from saved results (06_figures), and the results index.

``vrr.report`` gathers the rendering helpers (``render``: CSV/LaTeX tables, PNG/PDF figures), the
paper's table and figure builders (``paper``) and ``write_index``.
"""
from .index import publish, staging_dir, write_index  # noqa: F401
from .paper import (  # noqa: F401
    PAPER_POLICY_ORDER, Results, flip_grid, flip_region_rates, loop_dynamics_panels, parse_loop_pairs, pareto_panels,
    perturbed_rounds, probe_figure_inputs, table_ablations,
    table_calibration_stress, table_iterative_feedback, table_loop_dynamics, table_paired, table_robustness,
    table_loop_pairs, table_round_dynamics,
    table_stopping, verifier_markers,
)
from .render import (  # noqa: F401
    fig_cross_setting, fig_flip_grid, fig_gain_geometry, fig_loop_dynamics, fig_pareto, fig_probe_separation,
    FigureWriter, fig_signal_quality, interval_text, paired_interval_text, read_csv, save_figure, write_table,
)
from ..calibration.check import check_summary_line, folds_verdict_text  # noqa: F401  (03_calibrate, vrr status)
from .calibration_ablation_table import table_calibration_ablation  # noqa: F401
from .paper_comparison import (  # noqa: F401
    paper_comparison_summary, setting_implied_values, table_paper_comparison,
)
