"""The calibration-ablation table (06_figures): every setting's ``calibration_ablation.json`` (05_stats,
``vrr.stats.calibration_ablation``) in one CSV and LaTeX table, a row per setting, calibration and likelihood.
Its TPM column is the reference each row's differences are taken to: the TPM filters with the row's likelihood, so
the binomial and the beta-binomial rows of one setting have different references."""
from __future__ import annotations

from pathlib import Path

from ..calibration.check import folds_verdict_text
from ..common.jsonio import read_json
from ..stats.calibration_ablation import ABLATION_FILE
from . import render as rep

COLUMNS = [("setting", "Setting"), ("calibration", "Calibration"), ("likelihood", "Likelihood"),
           ("stop_V", "VRR-Stop V"), ("stop_vs_none", "VRR-Stop - no repair [95% CI]"),
           ("stop_vs_tpm", "VRR-Stop - TPM [95% CI]"), ("alg1_V", "Alg. 1 V"),
           ("alg1_vs_none", "Alg. 1 - no repair [95% CI]"), ("alg1_vs_tpm", "Alg. 1 - TPM [95% CI]"),
           ("tpm_V", "TPM V"), ("check", "Calibration check"),
           ("rho_error", "|rho0 - in-sample|, |rho1 - in-sample|"), ("belief_ece", "Belief ECE")]


def _difference(record: dict) -> str:
    return rep.paired_interval_text(record["dV"], record["dV_low"], record["dV_high"])


def ablation_rows(label: str, ablation: dict) -> list[dict]:
    """The table's rows of one setting's saved ablation; a row that does not apply reads "n/a (reason)"."""
    rows = []
    for r in ablation["rows"]:
        row = {"run": ablation["setting"], "setting": label, "calibration": r["calibration"],
               "likelihood": r["likelihood"]}
        if not r["applies"]:
            row.update(stop_V=f"n/a ({r['reason']})", stop_vs_none="", stop_vs_tpm="", alg1_V="n/a",
                       alg1_vs_none="", alg1_vs_tpm="", tpm_V="", check="", rho_error="",
                       belief_ece="")
        else:
            stop, alg1 = r["VRR-Stop"], r["Algorithm 1"]
            row.update(stop_V=f"{stop['V']:.3f}", stop_vs_none=_difference(stop["vs_no_repair"]),
                       stop_vs_tpm=_difference(stop["vs_tpm"]), alg1_V=f"{alg1['V']:.3f}",
                       alg1_vs_none=_difference(alg1["vs_no_repair"]), alg1_vs_tpm=_difference(alg1["vs_tpm"]),
                       tpm_V=f"{r['V']['TPM reference']:.3f}", check=folds_verdict_text(r["check"]),
                       belief_ece=f"{r['belief_ece']:.3f}")
            err = r["rate_error"]
            row["rho_error"] = f"{err['rho0']:.3f}, {err['rho1']:.3f}"
        rows.append(row)
    return rows


def table_calibration_ablation(res, out_dir: Path) -> list[dict]:
    """Table "calibration_ablation" over the runs of ``res`` (``vrr.report.Results``) that saved an ablation:
    VRR-Stop's and Algorithm 1's V under each calibration and vote likelihood, their paired differences to no
    repair and to the TPM reference, the folds' calibration check and the belief's calibration error. Writes
    nothing and returns [] when no run has one."""
    rows = []
    for run in res.runs:
        path = Path(res.root) / run / ABLATION_FILE
        if path.is_file():
            rows += ablation_rows(res.label(run), read_json(path))
    if rows:
        rep.write_table(rows, COLUMNS, Path(out_dir) / "calibration_ablation",
                        caption="Calibration ablation: label-free EM, labeled probe, semi-supervised (decision- and "
                                "Wald-checked) and PPI++ calibration under the binomial and the beta-binomial vote "
                                "likelihood (Eq. 5); paired 95% "
                                "bootstrap CIs; TPM under the same likelihood; rate errors against the window's own "
                                "labeled first plans.")
    return rows
