"""The ways to build an online controller: from calibrated parameters (Sec. 4.2), from a small labeled set
(Sec. 4.2-4.3, Algorithm 1 line 1), label-free (the binomial-mixture EM of Sec. 4.2), or from a saved
calibration (a file ``save_calibration`` wrote, or 03_calibrate's ``calibration.json`` with its cross-fit
folds, App. B). The fits themselves are in ``_calibrate`` and ``_calibration_file``."""
from __future__ import annotations

import os
from pathlib import Path


class Constructors:
    """The constructors and the calibration file of :class:`OnlineController` (which inherits them)."""

    @classmethod
    def from_parameters(cls, *, M: int, k_max: int, rho0: float, rho1: float, alpha, beta, pi: float,
                        **options) -> "OnlineController":
        """A controller from calibrated parameters (Sec. 4.2). ``alpha``/``beta`` may be per-round
        sequences of K_max rates (VRR-Stop-t). Options (:data:`CONFIG_FIELDS`; any other keyword is an
        :class:`UnknownOptionError` naming the nearest): ``policy`` ("algorithm1" | "vrr_stop" | "vrr_guard";
        left out: Algorithm 1 when ``draws`` and ``j_hat``/``stop_mode`` are given, VRR-Stop when neither is),
        ``delta`` (Eq. 9, an integer >= 0; default :func:`default_delta`, 5 at M = 8), ``tau`` (Eq. 4/7) or
        ``repair_cost`` with ``value`` (tau = repair_cost / value, :func:`tau_for_cost`), ``draws`` ({name:
        bootstrap draws of the parameter}, behind B_k) with ``eta`` (the level of B_k's one-sided bounds),
        ``j_hat`` and ``j_min`` (Algorithm 1 line 1) with ``check`` (the calibration check) and ``mode_evidence``
        (what the mode rests on), or ``stop_mode``, ``sequential`` ("off" | "exact" | "sprt" | "predictive")
        and ``error_rate`` (sprt, predictive), ``budget_calls`` / ``budget_tokens`` (per problem; when spent,
        Stop mode returns the judged plan with the highest posterior, Guard mode its keep-best incumbent,
        Eq. 9)."""
        return cls(M=M, k_max=k_max, rho0=rho0, rho1=rho1, alpha=alpha, beta=beta, pi=pi, **options)

    @classmethod
    def from_labeled(cls, *, votes, labels, repairs, M: int | None = None, k_max: int = 5,
                     policy: str = "algorithm1", j_min: float = 0.10, **options) -> "OnlineController":
        """Calibrate from a small labeled set (Sec. 4.2-4.3; Algorithm 1 line 1) and build the controller.

        ``votes``: per first plan, its accept count (0..M) or its list of 0/1 votes; ``labels``: the plans'
        true labels (0/1); ``repairs``: labeled repair pairs ``(label_before, label_after)``, or triples
        ``(label_before, label_after, round)`` to also fit round-dependent alpha_t, beta_t (VRR-Stop-t).
        rho0, rho1 come from labeled MLE, pi from the labels, alpha, beta from the pairs, J-hat from the
        labeled J test; the mode (Stop when J-hat >= ``j_min``, else Guard) and its reason are in
        ``ctl.calibration_report`` (:class:`vrr.policies.online_calibration.CalibrationReport`). Options:
        ``eta`` (the parameter box's level, default 0.05), ``seed`` (the J test's bootstrap), and those of
        :meth:`from_parameters`. ``ctl.save_calibration(path)`` writes the calibration.
        """
        from ._calibrate import calibrate_labeled

        return cls._calibrated(*calibrate_labeled(votes=votes, labels=labels, repairs=repairs, M=M, k_max=k_max,
                                                  policy=policy, j_min=j_min, **options))

    @classmethod
    def from_unlabeled(cls, *, counts, repairs, M: int, k_max: int = 5, policy: str = "vrr_stop",
                       **options) -> "OnlineController":
        """Label-free calibration (Sec. 4.2): rho0, rho1 and pi from the binomial-mixture EM on unlabeled
        first-plan accept counts, alpha and beta from a few labeled repair pairs. There is no labeled J test,
        so the report's mode is Stop by default policy ``"vrr_stop"``; Algorithm 1 needs ``j_hat`` from a
        labeled diagnostic (or :meth:`from_labeled`). Options as in :meth:`from_labeled`."""
        from ._calibrate import calibrate_unlabeled

        return cls._calibrated(*calibrate_unlabeled(counts=counts, repairs=repairs, M=M, k_max=k_max,
                                                    policy=policy, **options))

    @classmethod
    def _calibrated(cls, kwargs: dict, report) -> "OnlineController":
        ctl = cls(**kwargs)
        ctl.calibration_report = report
        return ctl.start()   # the first round's reason is the report's (with the J test's CI)

    @classmethod
    def from_calibration(cls, path: str | os.PathLike, fold: int | None = None, *, arrays=None,
                         policy: str | None = None, round_dynamics: bool = False, **options) -> "OnlineController":
        """A controller from a saved calibration: either a file :meth:`save_calibration` wrote (``format``
        ``vrr-online-calibration``, e.g. ``examples/calibration_small.json``) or the ``calibration.json``
        that 03_calibrate saved.

        Saved by :meth:`save_calibration`: the controller is rebuilt from the stored counts exactly as
        :meth:`from_labeled` built it (``policy`` defaults to the stored one; ``round_dynamics=True`` uses
        the stored per-round pairs for alpha_t, beta_t, VRR-Stop-t, with ``policy="vrr_stop"``).

        03_calibrate's file: ``fold`` uses that cross-fit fold's parameters, intervals and J diagnostic
        (exactly what replay uses for the fold's instances); ``None`` refits on all calibration instances
        (deployment). ``arrays``: the setting's ``arrays.npz`` (or a loaded ``Setting``); by default the file
        the calibration names (``arrays_path``). Without them the box comes from the saved counts
        (Clopper-Pearson) and J-hat from the saved probe diagnostic. ``policy`` defaults to "algorithm1".

        ``options`` as in :meth:`from_parameters`.
        """
        from ._calibration_file import is_online_calibration, load_online_calibration

        _refuse_state_file(path)
        if is_online_calibration(path):
            if fold is not None or arrays is not None:
                raise ValueError(f"{path}: 'fold' and 'arrays' apply to 03_calibrate's calibration.json, "
                                 "not to a saved online calibration")
            return cls._calibrated(*load_online_calibration(path, policy=policy, round_dynamics=round_dynamics,
                                                            **options))
        if round_dynamics:
            raise ValueError(f"{path}: round_dynamics=True needs a calibration saved by save_calibration with "
                             "per-round repair pairs; replay's VRR-Stop-t is vrr.calibration.crossfit_round_rates")
        from ..replay import controller_parameters  # the calibration file (and arrays) -> parameters

        params = controller_parameters(path, fold=fold, arrays=arrays, policy=policy or "algorithm1", **options)
        return cls(**params)

    def save_calibration(self, path: str | os.PathLike) -> Path:
        """Write the calibration this controller was built from (:meth:`from_labeled` /
        :meth:`from_unlabeled`) as JSON, atomically; :meth:`from_calibration` reads it back."""
        from ._calibration_file import save_online_calibration

        if self.calibration_report is None:
            raise ValueError("save_calibration: this controller was not calibrated here (from_labeled / "
                             "from_unlabeled / a saved online calibration); from_parameters has no data to save")
        return save_online_calibration(self.calibration_report, path)


def _refuse_state_file(path) -> None:
    """A controller's saved state (:meth:`OnlineController.save`) given as a calibration: say what it is."""
    import json

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return   # missing or not JSON: the calibration readers say so
    if isinstance(doc, dict) and {"version", "config", "state"} <= set(doc):
        raise ValueError(f"{path}: a controller state file (OnlineController.save), not a calibration; resume it "
                         "with OnlineController.load(path), or give the file save_calibration or 03_calibrate wrote")
