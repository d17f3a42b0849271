"""Shared fixtures.

``calibration(name)``: the ``calibration.json`` of any simulated or committed real setting, written by the same
vrr calls as 01_generate and 03_calibrate but in this process (no papermill, seconds per setting), once per run.
``chain_results``: one ``make reproduce`` of the small ``CHAIN_SUBSET`` into a temporary root, once per run; the
tests that use it are marked ``chain`` (``make test-fast`` leaves them out), and tests/test_chain.py checks that
its calibrations equal the in-process ones. A clone holds only the tables and figures under results/, so tests
never read the developer's results/."""
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

import vrr
from vrr.calibration.identifiability import PARAM_NAMES
from vrr.policies.replay import algorithm1_inputs, load_calibration

REPO = Path(__file__).resolve().parent.parent
# every setting make reproduce runs: the simulated ones and each committed real window
CHAIN_SETTINGS = sorted([p.stem for p in (REPO / "settings").glob("sim_*.yaml")]
                        + [p.parent.name for p in (REPO / "data" / "real").glob("*/arrays.npz")])
# the settings the chain runs through papermill in a test run; between them each kind of input the chain treats
# differently: a real window with its own probe, one sharing it (votes in stored order), a re-solve window with
# execution labels (left out of App. D's iterative-feedback table, which the two self-refine windows enter), a
# simulated setting with known parameters (the TPM reference, the delta ablation) and the non-stationary
# diagnostic (K_max = 6) with its resampling control (the loop-dynamics figure)
CHAIN_SUBSET = ("gsm8k_cpu_favorable", "gsm8k_cpu_pmstress", "mbpp_cpu_pmstress", "sim_nonstationary",
                "sim_nonstationary_control", "sim_qwen3b_pmstress")
# CHAIN_SETTINGS as test parameters: the ones outside CHAIN_SUBSET are marked all_settings (make test-fast
# checks the subset, make test every setting)
EVERY_SETTING = [name if name in CHAIN_SUBSET else pytest.param(name, marks=pytest.mark.all_settings)
                 for name in CHAIN_SETTINGS]
CHAIN_RESAMPLES = 200  # 05_stats' bootstrap resamples in the chain fixture (make's default is 10,000)


def write_calibration(name: str, results_root: Path, seed: int = 0) -> Path:
    """01_generate then 03_calibrate of one setting into ``results_root``, as the notebooks call vrr."""
    cfg = vrr.load_config(name)
    paths = vrr.setting_paths(cfg, REPO / "data", results_root)
    arrays = vrr.generate(cfg, paths)   # simulated: drawn into results_root; real: the committed arrays
    config = vrr.ReplayConfig.from_setting(cfg, seed=seed)
    summary = vrr.calibration_record(cfg, paths, arrays, config)
    vrr.write_json(paths.calibration, summary)
    return paths.calibration


@pytest.fixture(scope="session")
def calibration(tmp_path_factory):
    """``calibration(name)`` -> the path of that setting's calibration.json, built on first use."""
    root = tmp_path_factory.mktemp("calibrations")

    def path(name: str) -> Path:
        out = root / name / "calibration.json"
        return out if out.is_file() else write_calibration(name, root)
    return path


@pytest.fixture(scope="session")
def committed(calibration):
    """``committed(name)`` -> (setting, cross-fit, replay config, Algorithm 1 inputs) from ``calibration(name)``,
    computed once per run (B_k's 3,125-point grid over every instance takes seconds per setting)."""
    cache: dict = {}

    def inputs(name: str):
        if name not in cache:
            path = calibration(name)
            cf, config = load_calibration(path)
            setting = vrr.load_setting(REPO / json.loads(path.read_text())["arrays_path"])
            cache[name] = (setting, cf, config, algorithm1_inputs(setting, cf, config))
        return cache[name]
    return inputs


@pytest.fixture(scope="session")
def chain_results(tmp_path_factory) -> Path:
    """``make -j2 reproduce`` of CHAIN_SUBSET (steps 01-06, index) into a temporary root, as a user runs it."""
    root = tmp_path_factory.mktemp("chain_results")
    cmd = ["make", "--no-print-directory", "-j2", "reproduce", f"RESULTS={root}", f"SETTINGS={' '.join(CHAIN_SUBSET)}",
           f"RESAMPLES={CHAIN_RESAMPLES}", "FLIP_REPS=2", "FLIP_EVAL=60"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "make reproduce:" in proc.stdout
    return root


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """A test that uses the chain fixture is a chain test, whatever its module says (before -m selects).
    Under pytest-xdist (``-n``, ``--dist loadgroup``) the chain tests share one worker, so the chain is
    built once per run. An engine test must name its xdist group (tests/test_engine_real.py's two shares, balanced
    by measured time): one left to dynamic scheduling unbalances the two workers."""
    for item in items:
        if "chain_results" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.chain)
            item.add_marker(pytest.mark.xdist_group("chain"))
    ungrouped = [item.nodeid for item in items
                 if item.get_closest_marker("engine") and not item.get_closest_marker("xdist_group")]
    if ungrouped:
        raise pytest.UsageError("engine tests without an xdist_group mark (give each one of tests/test_engine_real.py's "
                                "SERVED_SHARE / IN_PROCESS_SHARE): " + ", ".join(ungrouped))


def pytest_configure(config):
    """``--dist loadgroup`` keeps the chain tests on one worker by the group in their node ids; pytest 9.2's
    structured ids lose it (pytest-xdist#1386), and every worker would build the chain. The test extra pins
    pytest<9.2; fail here, naming it, rather than run the suite at twice the cost (lift this with the pin)."""
    if getattr(config.option, "dist", "no") == "loadgroup" and tuple(map(int, pytest.__version__.split(".")[:2])) >= (9, 2):
        raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist --dist loadgroup does not group tests "
                                "(pytest-xdist#1386): pip install -e '.[test]' (pytest<9.2)")


def require_adapter_library(name: str):
    """Import an optional adapter library; skip without it, FAIL under VRR_REQUIRE_ADAPTERS=1 (make test)."""
    try:
        return __import__(name)
    except ImportError as exc:
        if os.environ.get("VRR_REQUIRE_ADAPTERS") == "1":
            pytest.fail(f"VRR_REQUIRE_ADAPTERS=1 but {name} is not importable ({exc}): pip install -e '.[dspy,inspect]'",
                        pytrace=False)
        pytest.skip(f"{name} not installed (set VRR_REQUIRE_ADAPTERS=1 to make this a failure)", allow_module_level=True)


# Connections to non-loopback addresses, recorded by ONE process-wide audit hook (a hook cannot be removed,
# so it is installed once here and every test module that uses `no_remote_connections` shares it).
_REMOTE: list = []


@pytest.fixture(scope="session")
def bfcl_venv():
    """bfcl-eval's own venv is installed, or a skip (a failure under VRR_REQUIRE_BFCL=1) naming the install command."""
    from vrr.loop.tasks import bfcl

    try:
        bfcl.bfcl_python()
    except bfcl.BFCLCheckerMissing as exc:
        if os.environ.get("VRR_REQUIRE_BFCL") == "1":
            pytest.fail(f"VRR_REQUIRE_BFCL=1 but {exc}")
        pytest.skip(f"bfcl-eval venv missing: {exc}")


def _audit(event, args):
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else None
        try:
            if host is not None and not ipaddress.ip_address(host).is_loopback:
                _REMOTE.append(address)
        except ValueError:
            _REMOTE.append(address)


sys.addaudithook(_audit)


@pytest.fixture
def no_remote_connections():
    """Fails the test if anything it ran tried to connect to a non-loopback address."""
    _REMOTE.clear()
    yield
    assert not _REMOTE, f"tried to reach the network: {_REMOTE}"


@st.composite
def vote_problems(draw, max_k_max: int = 5, max_n: int = 12):
    """A random stopping problem for the policy tests: M, K_max, vote counts S (n x K_max+1), point parameters
    (each of PARAM_NAMES inside (0, 1)) and a random interval box for Algorithm 1."""
    M = draw(st.integers(1, 9))
    k_max = draw(st.integers(0, max_k_max))
    n = draw(st.integers(1, max_n))
    S = np.array(draw(st.lists(st.lists(st.integers(0, M), min_size=k_max + 1, max_size=k_max + 1),
                               min_size=n, max_size=n)))
    params = {name: draw(st.floats(0.01, 0.99)) for name in PARAM_NAMES}
    box = {name: tuple(sorted((draw(st.floats(0.0, 1.0)), draw(st.floats(0.0, 1.0))))) for name in PARAM_NAMES}
    return M, k_max, S, params, box
