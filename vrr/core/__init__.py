"""Pure math of the paper: the noise model (Sec. 3), the belief filter and the one-step gain (Eq. 5-7),
the keep-best rule and its tail bounds (Eq. 9, Lemma 1). NumPy and SciPy only; no I/O.
"""
from .model import (  # noqa: F401
    NoiseParams,
    youden_j,
    population_step,
    population_dynamics,
    acceptance_rate,
    population_fixed_point,
    class_accept_rates,
)
from .belief import (  # noqa: F401
    vote_log_likelihoods,
    belief_update,
    predict,
    gain,
    boundary,
    should_repair,
    filter_beliefs,
)
from .guard import (  # noqa: F401
    keep_best,
    replacement_tail_exact,
    hoeffding_bound,
    union_bound,
    union_bound_exact,
)
