"""Adapters: the online controller (``vrr.policies.online``) as the stop rule of other frameworks' loops.

* ``vrr.adapters.dspy``: :class:`~vrr.adapters.dspy.VRRRefine`, a DSPy module with ``dspy.Refine``'s
  shape (sync and async), calibrated on a labeled devset by ``VRRRefine.calibrate`` (extra ``dspy``);
* ``vrr.adapters.inspect``: the Inspect AI solver :func:`~vrr.adapters.inspect.vrr_refine`, the cost scorer
  ``vrr_cost``, the calibration eval (``vrr_probe``, ``plan_labels``, ``calibrate_from_log``) and the grader
  panel reducer ``posterior_panel`` (extra ``inspect``).

Each module imports its framework on import, so this package imports neither: ``import vrr`` and
``import vrr.adapters`` stay light, and a missing extra is an error only where it is used.
``docs/adapters.md`` shows both in use.
"""
