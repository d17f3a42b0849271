"""Results do not depend on the CPU they are computed on. One machine plays two CPU kinds that differ in everything
that can change a printed number with the CPU: numpy's loops (``NPY_DISABLE_CPU_FEATURES``: its own AVX512 and
AVX2 loops of exp, log, log1p, expm1, power and the sorts, against the baseline loops of a CPU older than AVX2), the
BLAS/OpenMP thread count (one against two) and, unless the machine presets it, OpenBLAS's kernels (the ones it picks
for this CPU against Haswell's). Each kind runs 03_calibrate, 04_replay and 05_stats (with the calibration-input
ablation, BB-EM included) of a real and a simulated setting, its stopping table and a small flip-risk grid, in a
fresh process; both kinds must write the same bytes. The test has the power to fail: the same two kinds, with the
calibration's exp and log taken from numpy instead of ``vrr.common.fpmath``, write other bytes."""
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import vrr

REPO = Path(__file__).resolve().parent.parent
# The package under test, wherever it is imported from: the worker processes import the same one.
PACKAGE_ROOT = Path(vrr.__file__).resolve().parent.parent

WORKER = r"""
import hashlib, json, sys
from pathlib import Path

import numpy as np
import vrr
from vrr.calibration.identifiability import flip_risk_grid

data_root, out, scope = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if scope == "numpy-math":   # the calibration as it would be with numpy's CPU-dispatched exp and log
    from vrr.common import fpmath
    fpmath.log = lambda x, out=None: np.log(x, out=out)
    fpmath.exp = lambda x, out=None: np.exp(x, out=out)
    summary = vrr.calibration_summary(vrr.generate(vrr.load_config("gsm8k_cpu_pmstress"), vrr.setting_paths(
        vrr.load_config("gsm8k_cpu_pmstress"), data_root, out)), vrr.ReplayConfig(method="binomial_em"))
    text = json.dumps(summary, default=str, sort_keys=True)
    print(json.dumps({"calibration": hashlib.sha256(text.encode()).hexdigest()}))
    sys.exit(0)
ablations = {"deltas": [5], "n_calib": [50], "methods": ["binomial_em", "beta_binomial_em"]}
written = []
for name, ablate in (("gsm8k_cpu_pmstress", True), ("sim_nonstationary", False)):
    cfg = vrr.load_config(name)
    paths = vrr.setting_paths(cfg, data_root, out)
    arrays = vrr.generate(cfg, paths)
    summary = vrr.calibration_summary(arrays, vrr.ReplayConfig.from_setting(cfg, seed=0))
    summary.update({"loop_dynamics": vrr.loop_dynamics(arrays), "arrays_path": str(paths.arrays)})
    vrr.write_json(paths.calibration, summary)
    calibration, config = vrr.load_calibration(paths.calibration)
    vrr.save_replay(paths.replay, vrr.replay(arrays, config, calibration=calibration))
    stats = vrr.setting_statistics(arrays, vrr.load_replay(paths.replay), n_resamples=200, seed=0,
                                   ablations=ablations if ablate else None)
    vrr.write_json(paths.stats, stats)
    ablation = vrr.stats.setting_calibration_ablation(arrays, config, cfg["verifier"]["kind"], n_resamples=200)
    vrr.write_json(paths.results_dir / "calibration_ablation.json", ablation)
    written.append(paths.results_dir / "calibration_ablation.json")
    vrr.report.table_stopping(vrr.report.Results(out, [paths.run]), paths.run, paths.results_dir)
    written += [paths.calibration, paths.replay, paths.stats, paths.results_dir / f"stopping_{paths.run}.csv"]
grid = flip_risk_grid([0.05, 0.45], [0.0, 0.1, 0.3, 1.0], n_reps=2, n_eval=60, seed=0)
np.save(out / "flip_grid.npy", np.stack([grid.flips, grid.decisions]))
written.append(out / "flip_grid.npy")
# Simulated arrays live under the results root, whose path is in calibration.json: hash it out.
print(json.dumps({str(p.relative_to(out)): hashlib.sha256(p.read_bytes().replace(str(out).encode(), b"<root>")).hexdigest()
                  for p in written}))
"""


def numpy_targets(prefixes: tuple[str, ...]) -> str:
    """This machine's numpy dispatch targets that start with one of ``prefixes``, for NPY_DISABLE_CPU_FEATURES."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return " ".join(t for t in __cpu_dispatch__ if t.startswith(prefixes) and __cpu_features__.get(t))


def cpu_kinds() -> dict[str, dict[str, str]]:
    """Environment changes of each CPU kind the test plays (None: the variable is removed): this CPU's numpy loops
    with one BLAS thread, and a CPU without AVX2 and AVX512 with two BLAS threads and OpenBLAS's Haswell kernels."""
    avx2_and_up = numpy_targets(("X86_V3", "X86_V4", "AVX512", "AVX2", "FMA3"))
    older = {"NPY_DISABLE_CPU_FEATURES": avx2_and_up or None, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    if "OPENBLAS_CORETYPE" not in os.environ:   # a machine that presets it needs it to compute correctly
        older["OPENBLAS_CORETYPE"] = "Haswell"
    return {"numpy's own loops, 1 thread": {"NPY_DISABLE_CPU_FEATURES": None, "OPENBLAS_NUM_THREADS": "1",
                                            "OMP_NUM_THREADS": "1"},
            "no AVX2 or AVX512 loops, 2 threads" + (", Haswell kernels" if "OPENBLAS_CORETYPE" in older else ""): older}


# A worker that hangs is stopped after this long; the test waits on the workers, not on a clock
WORKER_TIMEOUT_S = 3600


def run_kind(changes: dict, out: Path, scope: str = "chain") -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]))
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    out.mkdir()
    proc = subprocess.run([sys.executable, "-c", WORKER, str(REPO / "data"), str(out), scope], env=env,
                          capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_cpu_kind_writes_the_same_calibration_replay_statistics_and_tables(tmp_path):
    kinds = cpu_kinds()
    with ThreadPoolExecutor(max_workers=2) as pool:
        digests = dict(zip(kinds, pool.map(lambda item: run_kind(item[1], tmp_path / f"kind{item[0]}"),
                                           enumerate(kinds.values()))))
    first, *others = kinds
    assert len(digests[first]) == 11 and others
    for kind in others:
        differ = sorted(f for f in digests[first] if digests[kind][f] != digests[first][f])
        assert not differ, f"{kind!r} ({kinds[kind]}) writes other bytes than {first!r}: {differ}"


def test_the_kinds_tell_apart_a_calibration_that_uses_numpys_exp_and_log(tmp_path):
    """The comparison above can fail: with numpy's exp and log in place of fpmath's, the two kinds' calibrations
    (binomial EM, its check) differ (on a CPU whose numpy has AVX2 or AVX512 loops of them)."""
    if not numpy_targets(("X86_V3", "X86_V4", "AVX512", "AVX2", "FMA3")):
        pytest.skip("numpy has no AVX2 or AVX512 loops on this CPU: its exp and log are the same in both kinds")
    kinds = cpu_kinds()
    with ThreadPoolExecutor(max_workers=2) as pool:
        digests = list(pool.map(lambda item: run_kind(item[1], tmp_path / f"kind{item[0]}", "numpy-math"),
                                enumerate(kinds.values())))
    assert digests[0] != digests[1], "numpy's exp and log give the same calibration in both kinds"


def test_the_numpy_kinds_played_differ_where_numpy_dispatches_by_cpu():
    """The kinds above are different machines for numpy on this one: with the AVX512 targets disabled (on an
    AVX512 machine) np.exp and np.log round differently, which is what vrr.common.fpmath is immune to."""
    avx512 = numpy_targets(("X86_V4", "AVX512"))
    probe = ("import numpy as np, hashlib\nx = np.linspace(-3, 3, 100001)\n"
             "print(hashlib.sha256(np.exp(x).tobytes() + np.log(x + 4).tobytes()).hexdigest())\n"
             "from vrr.common import fpmath\n"
             "print(hashlib.sha256(fpmath.exp(x).tobytes() + fpmath.log(x + 4).tobytes()).hexdigest())")
    outs = []
    for disabled in (None, avx512 or None):
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
        env.pop("NPY_DISABLE_CPU_FEATURES", None)
        if disabled:
            env["NPY_DISABLE_CPU_FEATURES"] = disabled
        outs.append(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                   check=True).stdout.split())
    (numpy_on, fp_on), (numpy_off, fp_off) = outs
    assert fp_on == fp_off
    if avx512:
        assert numpy_on != numpy_off, "disabling numpy's AVX512 targets no longer changes its exp/log loops"
    x = np.linspace(-3, 3, 1001)
    from vrr.common import fpmath
    assert np.allclose(fpmath.exp(x), np.exp(x), rtol=1e-15, atol=0)
    assert np.allclose(fpmath.log(x + 4), np.log(x + 4), rtol=1e-15, atol=1e-16)
    assert np.allclose(fpmath.log1p(x / 4), np.log1p(x / 4), rtol=1e-15, atol=1e-17)
