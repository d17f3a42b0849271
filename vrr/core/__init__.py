"""Pure math of the paper: the noise model (Sec. 3), the belief filter and the one-step gain (Eq. 5-7),
the keep-best rule and its tail bounds (Eq. 9, Lemma 1). NumPy and SciPy only; no I/O.
"""

import importlib

# name -> the module that defines it; imported on first use, so that `vrr.core.model` (the
# settings need it) does not load scipy.special with the belief filter.
_NAMES = {
    "NoiseParams": "model",
    "youden_j": "model",
    "population_step": "model",
    "population_dynamics": "model",
    "acceptance_rate": "model",
    "population_fixed_point": "model",
    "class_accept_rates": "model",
    "vote_log_likelihoods": "belief",
    "exchangeable_vote_log_likelihood": "belief",
    "belief_update": "belief",
    "predict": "belief",
    "gain": "belief",
    "boundary": "belief",
    "should_repair": "belief",
    "filter_beliefs": "belief",
    "keep_best": "guard",
    "replacement_tail_exact": "guard",
    "hoeffding_bound": "guard",
    "union_bound": "guard",
    "union_bound_exact": "guard",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
