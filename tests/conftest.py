"""Shared fixtures. ``chain_results``: a results root with steps 01-03 of the chain (arrays and saved
calibrations) for every simulated and committed real setting, built by ``make`` as ``make reproduce`` builds
it. A clone holds only the tables and figures under results/, so tests never read the developer's results/."""
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from vrr.calibration.identifiability import PARAM_NAMES

REPO = Path(__file__).resolve().parent.parent
# every setting make reproduce runs: the simulated ones and each committed real window
CHAIN_SETTINGS = sorted([p.stem for p in (REPO / "settings").glob("sim_*.yaml")]
                        + [p.parent.name for p in (REPO / "data" / "real").glob("*/arrays.npz")])


@pytest.fixture(scope="session")
def chain_results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("chain_results")
    targets = [str(root / name / "03_calibrate.ipynb") for name in CHAIN_SETTINGS]
    proc = subprocess.run(["make", "--no-print-directory", "-j2", f"RESULTS={root}", *targets], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    missing = [n for n in CHAIN_SETTINGS if not (root / n / "calibration.json").is_file()]
    assert not missing, f"make wrote no calibration for {missing}"
    return root


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
