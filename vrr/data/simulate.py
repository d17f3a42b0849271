"""Synthetic frozen trajectories drawn from the noise model (Sec. 3; App. B protocol).

The simulator writes the same compact ``Setting`` as real generation, so every analysis runs
on simulated and real data alike. Protocol: y_0 ~ Bern(pi); every round repairs
unconditionally (valid -> invalid w.p. beta_t, invalid -> valid w.p. alpha_t); every plan gets
M judge votes, Bin(M, 1 - rho1) if valid and Bin(M, rho0) if invalid, or beta-binomial votes
when the judge is heterogeneous across plans; plus an optional disjoint calibration probe with
``probe_M`` (16 in the paper) votes per plan.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .contract import Setting
from ..core.model import NoiseParams


SEED_RULE = "first 4 bytes (big-endian) of SHA-256 of '<setting name>:<seed>'"


def simulation_seed(name: str, seed: int) -> int:
    """The seed a simulated setting draws its arrays with (``SEED_RULE``): a stable hash of the setting's
    name with the chain's seed (the setting's ``seed`` field), so that no two settings draw the same
    uniforms and one chain seed still fixes every setting. A 32-bit value, as the settings' ``seed``."""
    digest = hashlib.sha256(f"{name}:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def simulation_protocol(cfg: dict[str, Any]) -> dict[str, Any]:
    """What a simulated setting's arrays are drawn with beyond its YAML, for the resolved protocol and the
    arrays' meta: the window length, the chain's seed, the derived simulation seed and its rule."""
    if cfg["kind"] != "simulated":
        raise ValueError(f"{cfg.get('_path', cfg['name'])}: field 'kind': is {cfg['kind']!r}, not 'simulated'")
    return {"N": int(cfg["window"]["N"]), "chain_seed": int(cfg["seed"]),
            "simulation_seed": simulation_seed(cfg["name"], cfg["seed"]), "seed_rule": SEED_RULE}


def perturbation_schedule(k_max: int, base: tuple[float, float], perturbed: tuple[float, float],
                          start_round: int) -> tuple[np.ndarray, np.ndarray]:
    """Round-dependent (alpha_t, beta_t): plans of rounds >= ``start_round`` come from the
    perturbed repairer (the non-stationary diagnostic: perturbation from round 3 on).

    Element t governs the transition from round t to t+1.
    """
    alpha_t = np.full(k_max, base[0], dtype=float)
    beta_t = np.full(k_max, base[1], dtype=float)
    switched = np.arange(1, k_max + 1) >= start_round
    alpha_t[switched], beta_t[switched] = perturbed
    return alpha_t, beta_t


def _votes(rng, valid: np.ndarray, M: int, rho0: float, rho1: float, concentration: float | None):
    mean = np.where(valid, 1.0 - rho1, rho0)
    if concentration is None:
        return rng.binomial(M, mean)
    # Per-instance judge leniency: one quantile u_i per instance (row), shared by all its
    # rounds, maps to an acceptance rate Beta(mean c, (1 - mean) c).ppf(u_i) for its class.
    # Marginally each plan's votes are beta-binomial; a lenient instance stays lenient.
    eps = 1e-9
    leniency = rng.random(valid.shape[0])
    if valid.ndim == 2:
        leniency = np.broadcast_to(leniency[:, None], valid.shape)
    from scipy import stats  # imported on use: importing scipy.stats costs ~1 s of CPU in every notebook kernel

    rate = stats.beta.ppf(leniency, np.clip(mean, eps, 1 - eps) * concentration,
                          np.clip(1 - mean, eps, 1 - eps) * concentration)
    return rng.binomial(M, rate)


def simulate_setting(params: NoiseParams, n: int, k_max: int = 5, M: int = 8, seed: int = 0,
                     alpha_t=None, beta_t=None, judge_concentration: float | None = None,
                     probe_n: int = 0, probe_M: int = 16, name: str = "simulated",
                     extra_meta: dict | None = None) -> Setting:
    """Draw one setting's arrays from known parameters.

    ``alpha_t``/``beta_t`` (length ``k_max``) override the stationary alpha, beta per round;
    ``judge_concentration`` switches on per-instance judge heterogeneity (beta-binomial votes;
    smaller = more spread).
    The true parameters are stored in ``meta["true_params"]`` for the TPM reference.
    """
    if n < 1 or k_max < 1 or M < 1:
        raise ValueError("simulate_setting: n, k_max and M must be positive")
    rng = np.random.default_rng(seed)
    alpha_t = np.broadcast_to(np.asarray(params.alpha if alpha_t is None else alpha_t, float), (k_max,))
    beta_t = np.broadcast_to(np.asarray(params.beta if beta_t is None else beta_t, float), (k_max,))
    y = np.empty((n, k_max + 1), dtype=bool)
    y[:, 0] = rng.random(n) < params.pi
    for t in range(k_max):
        u = rng.random(n)
        y[:, t + 1] = np.where(y[:, t], u >= beta_t[t], u < alpha_t[t])
    S = _votes(rng, y, M, params.rho0, params.rho1, judge_concentration)
    meta = {
        "setting": name, "source": "simulation", "seed": int(seed), "M": int(M), "K_max": int(k_max),
        "true_params": params.as_dict(), "alpha_t": alpha_t.tolist(), "beta_t": beta_t.tolist(),
        "judge_concentration": judge_concentration,
    }
    meta.update(extra_meta or {})
    probe_S = probe_y = None
    if probe_n > 0:
        probe_y = rng.random(probe_n) < params.pi
        probe_S = _votes(rng, probe_y, probe_M, params.rho0, params.rho1, judge_concentration)
    return Setting(S=S, y=y.astype(np.int8), M=M, probe_S=probe_S,
                   probe_M=probe_M if probe_n > 0 else None,
                   probe_y=None if probe_y is None else probe_y.astype(np.int8), meta=meta)


def simulate_from_config(cfg: dict[str, Any], n: int | None = None, seed: int | None = None,
                         probe_n: int | None = None) -> Setting:
    """Draw a simulated setting's arrays from its registered parameters (``vrr.settings.load_config``);
    ``n``, ``seed`` and ``probe_n`` override the window length, the chain's seed and the probe size. The
    arrays are drawn with :func:`simulation_seed` of the setting's name and the chain's seed; the meta
    records both and the rule."""
    protocol = simulation_protocol(cfg if seed is None else {**cfg, "seed": int(seed)})
    params = NoiseParams(**{k: float(cfg["params"][k]) for k in ("rho0", "rho1", "alpha", "beta", "pi")})
    alpha_t = beta_t = None
    if "schedule" in cfg:
        sched = cfg["schedule"]
        alpha_t, beta_t = perturbation_schedule(
            cfg["K_max"], (params.alpha, params.beta),
            (float(sched["perturbed"]["alpha"]), float(sched["perturbed"]["beta"])), int(sched["start_round"]))
    meta = {"label": cfg["label"], "task": cfg["task"], "models": cfg["models"],
            "perturbation": cfg["perturbation"]["regime"], "temperatures": cfg["temperatures"], "shift": cfg["shift"],
            "chain_seed": protocol["chain_seed"], "seed_rule": protocol["seed_rule"]}
    return simulate_setting(
        params, n=int(n or cfg["window"]["N"]), k_max=int(cfg["K_max"]), M=int(cfg["M"]),
        seed=protocol["simulation_seed"], alpha_t=alpha_t, beta_t=beta_t,
        judge_concentration=cfg.get("judge_concentration"),
        probe_n=int(cfg["probe"]["n"] if probe_n is None else probe_n), probe_M=int(cfg["probe"]["M"]),
        name=cfg["name"], extra_meta=meta)
