"""Adapters: the online controller (``vrr.policies.online``) as the stop rule of other frameworks' loops.

* ``vrr.adapters.dspy``: :class:`~vrr.adapters.dspy.VRRRefine`, a DSPy module with ``dspy.Refine``'s
  shape (extra ``dspy``);
* ``vrr.adapters.inspect``: :func:`~vrr.adapters.inspect.vrr_refine`, an Inspect AI solver running
  generate -> judge votes -> repair (extra ``inspect``).

Each module imports its framework on import, so this package imports neither: ``import vrr`` and
``import vrr.adapters`` stay light, and a missing extra is an error only where it is used.
``docs/adapters.md`` shows both in use.
"""
