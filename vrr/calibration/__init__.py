"""Calibration (Sec. 4.2, App. A/B/E/I): vote-noise estimators, repair transitions, the prior,
five-fold cross-fitting; the error radius B_k, sign identifiability (Eq. 8, Prop. 1) and the labeled J test.
"""
from .estimators import (  # noqa: F401
    VOTE_METHODS,
    EstimatorOptions,
    MAX_TRANSITION_PAIRS,
    VoteNoiseFit,
    TransitionFit,
    Calibration,
    mixture_loglik,
    binomial_mixture_em,
    binomial_mixture_em_many,
    method_of_moments,
    labeled_mle,
    beta_binomial_em,
    fit_vote_noise,
    fit_exchangeable_votes,
    labeled_subset,
    transition_rates,
    defined_rate,
    MIN_VOTES,
    calibrate,
    crossfit_folds,
    CrossFit,
    crossfit,
    with_params,
)
from .correlated import (  # noqa: F401
    LIKELIHOODS,
    labeled_bb_mle,
    semisupervised_bb,
)
from .identifiability import (  # noqa: F401
    PARAM_NAMES,
    parameter_intervals,
    crossfit_intervals,
    error_radius,
    radius_grid,
    sign_identifiable,
    JDiagnostic,
    labeled_j_diagnostic,
    FlipGrid,
    flip_risk_grid,
)
from .round_dynamics import (  # noqa: F401
    KAPPA_GRID,
    RoundRates,
    round_transition_counts,
    shrinkage_strength,
    shrunk_rate,
    round_rates,
    crossfit_round_rates,
)
