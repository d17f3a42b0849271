"""What an online controller runs, defined once: the mode it starts each problem in (Algorithm 1 line 1, or
the policy asked for) and Eq. 9's default retention margin for M votes per round.

``OnlineController`` starts every problem with :func:`planned_mode`, and every calibration report
(``_calibrate``: ``from_labeled``, ``from_calibration``, the adapters' ``VRRRefine.calibrate`` and
``calibrate_from_log``) takes its ``mode`` and ``reason`` from the same call, so a report cannot say one mode
while the controller runs another.
"""
from __future__ import annotations

POLICIES = ("algorithm1", "vrr_stop", "vrr_guard")
# Eq. 9's retention margin: the paper's replay-tuned delta = 5 at M = 8 (App. I). Left out, delta keeps that
# share of a round's votes, ceil(5 M / 8): with delta = 5 at M <= 4 no later plan could ever replace p_0.
PAPER_DELTA, PAPER_M = 5, 8


def default_delta(M: int) -> int:
    """Eq. 9's retention margin for M votes per round when none is given: ceil(5 M / 8), the paper's
    delta = 5 at M = 8 (App. I) as the same share of a round's votes (3 at M = 4, 4 at M = 6)."""
    return max(1, -(-PAPER_DELTA * int(M) // PAPER_M))


def planned_mode(policy: str, j_hat: float | None = None, j_min: float = 0.10, stop_mode: bool | None = None,
                 j_ci: tuple | None = None, check=None, evidence: dict | None = None) -> tuple[str, str]:
    """The mode a controller starts each problem in, and why: the one definition behind the controller's
    first decision and every calibration report (``CalibrationReport.mode`` / ``reason``).

    ``"vrr_stop"``: Stop (Sec. 4.1); ``"vrr_guard"``: Guard (Sec. 4.3); ``"algorithm1"``: the given
    ``stop_mode``, else :func:`vrr.policies.mode.algorithm1_mode` with the labeled J-hat, the calibration
    ``check`` and the mode ``evidence`` (``{"labeled_rates": bool, "replay": null | {...}}``: whether the rates are
    labeled, and the labeled replay of both modes where the calibration has trajectories), the definition replay
    uses. Under VRR-Stop or VRR-Guard an Algorithm 1 that would have chosen the other mode is named in the reason.
    """
    from ..mode import algorithm1_mode

    evidence = evidence or {}
    would, why = (None, "") if j_hat is None else algorithm1_mode(
        j_hat, j_min, check, j_ci=j_ci, replay=evidence.get("replay"),
        labeled_rates=bool(evidence.get("labeled_rates", False)))
    if policy == "vrr_stop":
        reason = "VRR-Stop (Sec. 4.1): commit when G-hat_k <= tau"
        if would == "guard":
            reason += f"; policy 'vrr_stop' as asked, although Algorithm 1 would run Guard ({why})"
        return "stop", reason
    if policy == "vrr_guard":
        reason = "VRR-Guard (Sec. 4.3): full budget, keep-best incumbent (Eq. 9)"
        if would == "stop":
            reason += f"; policy 'vrr_guard' as asked, although Algorithm 1 would run Stop ({why})"
        return "guard", reason
    if policy != "algorithm1":
        raise ValueError(f"field 'policy': {policy!r} is not one of {POLICIES}")
    if stop_mode is not None:
        return ("stop", "Stop mode given") if stop_mode else ("guard", "Guard mode given")
    if j_hat is None:
        raise ValueError("field 'j_hat': Algorithm 1 chooses its mode from the labeled J diagnostic; give j_hat "
                         "(or stop_mode), or pass policy='vrr_stop'")
    return would, why
