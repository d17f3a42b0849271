"""Algorithm 1's mode (App. A, line 1, with the calibration check): one pure definition for replay and the online
controller.

Stop mode needs two things the calibration can show before any problem is seen: the labeled separation test's
J-hat >= J_min (the votes separate valid from invalid plans, Sec. 4.3), and the calibration check
(``vrr.calibration.check``) passing (the label-free vote model agrees with the probe's labels, so the belief
filter's likelihood is not mis-specified in a way that moves the rates). Either failing gives Guard mode. Within
Stop mode, each round still needs the sign of G-hat_k identifiable (Eq. 8, ``rules.algorithm1_step``).
"""
from __future__ import annotations

import math


def algorithm1_mode(j_hat: float | None, j_min: float = 0.10, check=None, j_ci: tuple | None = None) -> tuple[str, str]:
    """(``"stop"`` or ``"guard"``, the reason) for Algorithm 1's start of every problem.

    ``j_hat``: the labeled J-hat (NaN or None: undefined, a class absent); ``check``: the calibration check
    (a ``CalibrationCheck`` or its ``as_dict()``), or None where there is no labeled probe to check against,
    in which case the mode rests on J-hat alone (the paper's line 1) and the reason says so. ``j_ci``: the J
    test's confidence interval, named in the reason when given."""
    if j_hat is None or math.isnan(j_hat):
        return "guard", "labeled J diagnostic undefined (a class is absent): Guard mode"
    ci = f" (95% CI {j_ci[0]:.3f}..{j_ci[1]:.3f})" if j_ci is not None else ""
    if j_hat < j_min:
        return "guard", (f"labeled J-hat {j_hat:.3f}{ci} below J_min {j_min:g}: the votes barely separate valid "
                         "from invalid plans: Guard mode (keep-best, Eq. 9)")
    if check is None:
        return "stop", (f"labeled J-hat {j_hat:.3f}{ci} >= J_min {j_min:g}; no calibration check (no labeled "
                        "probe): Stop mode (Algorithm 1 line 1)")
    passed = check["passed"] if isinstance(check, dict) else check.passed
    reason = check["reason"] if isinstance(check, dict) else check.reason
    if not passed:
        return "guard", f"calibration check rejects ({reason}): Guard mode"
    return "stop", f"labeled J-hat {j_hat:.3f}{ci} >= J_min {j_min:g} and the calibration check passes: Stop mode"
