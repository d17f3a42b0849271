"""The simulated settings' seeds and window length (vrr.data.simulate.simulation_seed, settings/base/simulated.yaml):
every setting draws with a seed of its own, recorded where a reader looks, and N resolves each policy's V to
1.5 pp."""
import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest
from hypothesis import given, strategies as st

import vrr
from vrr.chain import main
from vrr.data.simulate import SEED_RULE, simulate_from_config, simulation_protocol, simulation_seed
from vrr.settings import list_settings

SIMULATED = list_settings(kind="simulated")
HALF_WIDTH = 0.015   # the largest 95 % CI half-width of a simulated V


def test_no_two_simulated_settings_share_a_seed():
    seeds = {name: simulate_from_config(vrr.load_config(name), n=5).meta["seed"] for name in SIMULATED}
    assert len(set(seeds.values())) == len(seeds), seeds
    assert all(seeds[name] == simulation_seed(name, vrr.load_config(name)["seed"]) for name in SIMULATED)


@given(st.text(min_size=1, max_size=30), st.integers(0, 2**32 - 1))
def test_the_seed_rule_is_a_stable_32_bit_hash_of_name_and_chain_seed(name, seed):
    value = simulation_seed(name, seed)
    assert 0 <= value < 2**32 and value == simulation_seed(name, seed)
    assert simulation_seed(name + "x", seed) != value or simulation_seed(name, seed + 1) != value


def test_the_seed_rule_does_not_depend_on_the_process():
    """hashlib, not Python's salted hash(): the same value in every interpreter (a fixed reference)."""
    assert simulation_seed("sim_qwen3b_pmstress", 0) == 206350752


@pytest.mark.parametrize("name", SIMULATED)
def test_each_setting_records_its_seed_in_the_arrays_and_the_resolved_protocol(name):
    cfg = vrr.load_config(name)
    meta = simulate_from_config(cfg, n=5).meta
    assert (meta["seed"], meta["chain_seed"], meta["seed_rule"]) == \
        (simulation_seed(name, cfg["seed"]), cfg["seed"], SEED_RULE)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["resolve", name]) == 0
    assert json.loads(out.getvalue())["simulation"] == simulation_protocol(cfg)
    # an overridden chain seed (01's sim_seed) goes through the same rule
    assert simulate_from_config(cfg, n=5, seed=7).meta["seed"] == simulation_seed(name, 7)


@pytest.mark.parametrize("name", SIMULATED)
def test_the_window_resolves_every_policys_validity_to_a_stated_half_width(name):
    n = vrr.load_config(name)["window"]["N"]
    assert 1.96 * np.sqrt(0.25 / n) <= HALF_WIDTH   # the widest binomial CI, at V = 0.5


@pytest.mark.parametrize("name", SIMULATED)
def test_realized_initial_validity_is_within_the_ci_of_pi(name):
    cfg = vrr.load_config(name)
    setting = simulate_from_config(cfg)
    pi, n = cfg["params"]["pi"], setting.n_instances
    assert abs(setting.y[:, 0].mean() - pi) <= 1.96 * np.sqrt(pi * (1 - pi) / n)


def test_the_probe_of_a_setting_is_drawn_after_its_trajectories():
    """One seed per setting for the whole draw: a probe size changes the probe, never the trajectories."""
    cfg = vrr.load_config("sim_qwen3b_pmstress")
    a, b = simulate_from_config(cfg, n=50, probe_n=0), simulate_from_config(cfg, n=50, probe_n=20)
    assert np.array_equal(a.y, b.y) and np.array_equal(a.S, b.S) and b.probe_S.shape == (20,)
