"""Algorithm 1's mode (App. A, line 1): one pure definition for replay and the online controller.

The mode is chosen once per calibration, from the strongest evidence the calibration has:

1. Labeled trajectories (the calibration instances of a window: every round's votes and labels). Both modes are
   replayed on them with the calibrated parameters (:func:`labeled_replay`), and the mode with the higher validity
   runs (Stop on a tie). This is direct evidence of which mode serves this loop; it catches what the noise model
   misses (votes correlated within a plan, repair that changes over rounds, a label-free fit that collapsed).
2. Without them, the rates' source decides. Labeled rates (a labeled MLE, or a calibration whose decision check
   sent it to the labels) keep the belief calibrated at any J, so Stop runs; with J near 0 the belief stays near
   the prior and VRR-Stop repairs exactly while the prior lies below b* (Eq. 7). Label-free rates need the labeled
   separation test (the paper's line 1): Stop where J-hat >= J_min, Guard below, because the binomial-mixture EM
   is not identifiable as J -> 0 (App. A "Calibration Estimators").

A J-hat that cannot be computed (a class absent from the labeled sample) gives Guard. The calibration checks
(``vrr.calibration.decision_check``, and the Wald check as a diagnostic) choose the rates, not the mode: a
rejection sends the decisions to the labeled rates (``vrr.calibration.estimators``, ``semisupervised_checked``;
:func:`vrr.policies.replay.algorithm1_fold_plan`); under ``ppi``, the default, the labels anchor the rates
already. The reason names what decided.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

MODES = ("stop", "guard")


def _real(value, field: str) -> float | None:
    """``value`` as a float (None and NaN pass as given); a bool, a string or anything else is refused."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"Algorithm 1 mode: field '{field}': expected a number, got {value!r}")
    return float(value)


def _check_passed(check) -> tuple[bool, str]:
    passed = check.get("passed") if isinstance(check, dict) else getattr(check, "passed", None)
    reason = check.get("reason", "") if isinstance(check, dict) else getattr(check, "reason", "")
    if not isinstance(passed, (bool, np.bool_)):
        raise ValueError(f"Algorithm 1 mode: field 'check.passed': expected true or false, got {passed!r}")
    return bool(passed), str(reason)


def labeled_replay(S, y, M: int, params: dict, delta: int, tau: float = 0.0) -> dict:
    """Both modes replayed on labeled trajectories (``S``, ``y`` [n, K+1]) with the calibrated ``params`` (rho0,
    rho1, alpha, beta, pi; phi0, phi1 under the exchangeable-vote likelihood): V of Stop mode (VRR-Stop's rule,
    Eqs. 5-7) and of Guard mode (Eq. 9), and n."""
    from .rules import vrr_guard, vrr_stop

    S, y = np.asarray(S), np.asarray(y)
    if S.shape != y.shape or S.ndim != 2 or S.shape[0] == 0:
        raise ValueError(f"labeled_replay: S and y must be equal, non-empty [n, K+1] arrays, got {S.shape}, {y.shape}")
    stop = vrr_stop(S, M, tau=tau, **params).validity(y)
    guard = vrr_guard(S, delta).validity(y)
    n = S.shape[0]
    return {"v_stop": float(np.count_nonzero(stop) / n), "v_guard": float(np.count_nonzero(guard) / n), "n": int(n)}


def algorithm1_mode(j_hat: float | None, j_min: float = 0.10, check=None, j_ci: tuple | None = None,
                    replay: dict | None = None, labeled_rates: bool = False) -> tuple[str, str]:
    """(``"stop"`` or ``"guard"``, the reason) for Algorithm 1's start of every problem (module docstring).

    ``j_hat``: the labeled J-hat (NaN or None: undefined, a class absent); ``replay``: :func:`labeled_replay` of
    the calibration's labeled trajectories, when it has them; ``labeled_rates``: the decisions use labeled rates;
    ``check``: the calibration check behind the rates (a dict or an object with ``passed`` and ``reason``), named in
    the reason; ``j_ci``: the J test's confidence interval, named in the reason when given."""
    j_hat = _real(j_hat, "j_hat")
    j_min = _real(j_min, "j_min")
    if j_min is None or math.isnan(j_min):
        raise ValueError("Algorithm 1 mode: field 'j_min': expected a number")
    if not isinstance(labeled_rates, (bool, np.bool_)):
        raise ValueError(f"Algorithm 1 mode: field 'labeled_rates': expected true or false, got {labeled_rates!r}")
    note = ""
    if check is not None:
        passed, why = _check_passed(check)
        note = "; calibration check passes" if passed else f"; calibration check rejects ({why}): labeled rates"
    if j_hat is None or math.isnan(j_hat):
        return "guard", "labeled J diagnostic undefined (a class is absent): Guard mode" + note
    ci = f" (95% CI {j_ci[0]:.3f}..{j_ci[1]:.3f})" if j_ci is not None else ""
    j_text = f"labeled J-hat {j_hat:.3f}{ci}"
    if replay is not None:
        v_stop, v_guard = _real(replay.get("v_stop"), "replay.v_stop"), _real(replay.get("v_guard"), "replay.v_guard")
        if v_stop is None or v_guard is None or not (math.isfinite(v_stop) and math.isfinite(v_guard)):
            raise ValueError(f"Algorithm 1 mode: field 'replay': expected finite v_stop and v_guard, got {replay!r}")
        on = f"on {replay.get('n', '?')} labeled calibration trajectories"
        if v_stop >= v_guard:
            return "stop", (f"Stop mode: VRR-Stop's rule reaches V {v_stop:.3f} {on}, Guard {v_guard:.3f}; "
                            f"{j_text}" + note)
        return "guard", (f"Guard mode (keep-best, Eq. 9): it reaches V {v_guard:.3f} {on}, VRR-Stop's rule "
                         f"{v_stop:.3f}; {j_text}" + note)
    if labeled_rates:
        return "stop", (f"{j_text}; labeled rates keep the belief calibrated at any J: Stop mode" + note)
    if j_hat < j_min:
        return "guard", (f"{j_text} below J_min {j_min:g}: the votes barely separate valid from invalid plans and "
                         "the label-free rates cannot be trusted: Guard mode (keep-best, Eq. 9)" + note)
    return "stop", f"{j_text} >= J_min {j_min:g}: Stop mode (Algorithm 1 line 1)" + note


def paper_mode(j_hat: float | None, j_min: float = 0.10) -> tuple[str, str]:
    """The paper's line 1 as written (App. A, Algorithm 1): Stop where the labeled J-hat >= J_min, else Guard (an
    undefined J-hat, a class absent, gives Guard). The row "Algorithm 1 (paper)" runs it."""
    j_hat = _real(j_hat, "j_hat")
    if j_hat is None or math.isnan(j_hat):
        return "guard", "labeled J diagnostic undefined (a class is absent): Guard mode"
    if j_hat < j_min:
        return "guard", f"labeled J-hat {j_hat:.3f} below J_min {j_min:g}: Guard mode (Algorithm 1 line 1)"
    return "stop", f"labeled J-hat {j_hat:.3f} >= J_min {j_min:g}: Stop mode (Algorithm 1 line 1)"
