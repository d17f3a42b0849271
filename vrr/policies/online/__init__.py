"""Online controller: VRR-Stop, VRR-Guard and Algorithm 1 run inside a live verify-repair loop
(Sec. 4, Eqs. 4-9; App. A, Algorithm 1, with the mode chosen online).

The offline policies (``vrr.policies.rules``) replay whole frozen trajectories. This controller takes
one round at a time: the loop feeds it the current plan's judge votes and gets back a :class:`Decision`
(commit or repair, the candidate to return, b_k, G-hat_k, B_k, the mode with its reason, the verifier
and repair calls used so far). Every equation comes from the offline code: the belief update (Eq. 5)
and predict step from ``vrr.core.belief``, the commit tests from ``rules.stop_commits`` (Eqs. 6-7) and
``rules.algorithm1_step`` (Eq. 8), keep-best from ``vrr.core.guard.keep_best_step`` (Eq. 9) and the error
radius grid from ``vrr.calibration.identifiability.radius_grid``. Replayed round by round over frozen
arrays it commits the same rounds as the offline policies (``tests/test_online.py``).

Usage, M votes per round (``generate``, ``judge``, ``repair`` are the loop's own callables)::

    from vrr.policies.online import OnlineController

    ctl = OnlineController.from_calibration("examples/calibration_small.json")
    ctl.start()                                        # a new problem
    plans = [generate(problem)]
    while True:
        d = ctl.observe([judge(plans[-1]) for _ in range(ctl.M)])   # votes are 0/1 ints
        if d.action == "commit":
            answer = plans[d.candidate]                # Guard's incumbent, or the current plan
            break
        plans.append(repair(plans[-1]))

Sequential voting, one vote at a time (``sequential="exact"``: the same decisions with fewer votes;
``"sprt"``: also stop once the votes' likelihood ratio crosses Wald's boundaries at ``error_rate``;
``"predictive"``: stop once the action agrees with the full-M action with probability >= 1 - ``error_rate``)::

    while True:
        while ctl.need_vote():
            ctl.add_vote(judge(plans[-1]))
        d = ctl.decide()
        ...

``ctl.to_json()`` / ``OnlineController.from_json(text)`` (``save`` / ``load`` for files) carry the whole
state, so a loop can resume mid-trajectory, even mid-round.

Policies: ``"algorithm1"`` (the mode of ``vrr.policies.mode.algorithm1_mode``, chosen once per calibration and
held for the problem; Stop mode runs VRR-Stop's rule and reports whether Eq. 8 identifies the sign),
``"vrr_stop"`` (Eqs. 5-7; ``alpha`` and ``beta`` may be per-round sequences alpha_t, beta_t, the VRR-Stop-t
variant of ``vrr.calibration.round_dynamics``) and ``"vrr_guard"`` (Eq. 9, full budget, keep-best).
Left out, the policy is ``"algorithm1"`` when the parameter box and the J diagnostic are given
(``intervals`` with ``j_hat`` or ``stop_mode``), ``"vrr_stop"`` when neither is.

API stability: the names above and the fields of :class:`Decision` are the stable interface (the
adapters in ``vrr.adapters`` build on them).

The package, one part of the paper per module:

* ``_controller``: :class:`OnlineController`, the state of the current problem and the observe/decide cycle;
* ``_round``: one round of Algorithm 1, lines 4-19 (Eqs. 5-9, Eq. 8's Stop-to-Guard switch);
* ``_curtail``: when to stop asking for votes: exact, future-aware, predictive and SPRT curtailment;
* ``_budget``: tau from a repair cost (Eq. 4), budgets of verifier calls and tokens, what a spent budget returns;
* ``_state``: the JSON state and its version, :class:`ControllerStateError`;
* ``_options``: the options, checked in one place; ``_checks``: the number checks they share;
* ``_modes``: the starting mode (Algorithm 1 line 1, :func:`planned_mode`) and Eq. 9's :func:`default_delta`;
* ``_decision``: :class:`Decision` and the step the curtailment rules compare;
* ``_constructors``: ``from_parameters``, ``from_labeled``, ``from_unlabeled``, ``from_calibration``;
* ``_calibrate`` and ``_calibration_file``: the calibration where the loop runs (Sec. 4.2-4.3) and its file,
  public as ``vrr.policies.online_calibration``.
"""
from ._budget import tau_for_cost
from ._controller import OnlineController
from ._decision import Decision
from ._modes import PAPER_DELTA, PAPER_M, POLICIES, default_delta, planned_mode
from ._options import CONFIG_FIELDS, SEQUENTIAL, UnknownOptionError
from ._state import STATE_VERSION, ControllerStateError

__all__ = ["OnlineController", "Decision", "ControllerStateError", "UnknownOptionError", "tau_for_cost",
           "planned_mode", "default_delta", "POLICIES", "SEQUENTIAL", "PAPER_DELTA", "PAPER_M", "STATE_VERSION",
           "CONFIG_FIELDS"]

# the public names are shown, pickled and documented as this module's, wherever their code lives (httpx style)
for _name in __all__:
    if callable(globals()[_name]):
        globals()[_name].__module__ = __name__
del _name
