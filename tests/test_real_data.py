"""The committed frozen CPU trajectories (data/real/): complete windows, the data contract,
labels that re-derive exactly from the stored text, and a replay through the notebook chain with
no model installed."""
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import vrr.report
from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop.config import from_stored
from vrr.loop.store import RunPaths
from vrr.loop.tasks import get_task, mbpp
from vrr.loop import sandbox
from vrr.settings import load_config

from conftest import CHAIN_SUBSET

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "data" / "real"
# Every frozen real window this repository commits (a finished window has its arrays file).
COMMITTED = sorted(p.parent.name for p in REAL.glob("*/arrays.npz"))
SANDBOX_SAMPLE = 4  # plans per label per MBPP window that really run in the sandbox


def test_the_real_windows_of_every_task_are_committed():
    tasks = {load_config(n)["task"] for n in COMMITTED}
    assert {"gsm8k", "math500", "bfcl_single", "mbpp"} <= tasks, COMMITTED


@pytest.mark.parametrize("name", COMMITTED)
def test_frozen_window_is_complete(name):
    d = REAL / name
    cfg = json.loads((d / "config.json").read_text())
    st = load_setting(d / "arrays.npz")
    N = st.S.shape[0]
    reg = load_config(name)
    assert N == cfg["n"]
    if N < 100:
        # only a window whose first plans are (nearly) all valid or all invalid may be smaller: N = 20 proves
        # the pipeline end to end (docs/screening.md), calibrated on its labels, with no probe
        assert N >= 20 and not 0.1 <= st.y[:, 0].mean() <= 0.9, f"{name}: N = {N} < 100 on an informative window"
        assert st.probe_S is None and cfg["probe_n"] == 0 and reg["calibration"]["method"] == "labeled_mle"
    else:
        assert st.probe_S is not None and st.probe_M == 16 and len(st.probe_y) >= 50
    assert st.meta["indices"] == list(range(cfg["start"], cfg["start"] + N))
    assert st.S.shape == st.y.shape == (N, cfg["K_max"] + 1) and st.M == cfg["M"] == 8
    assert st.S.min() >= 0 and st.S.max() <= st.M and set(np.unique(st.y)) <= {0, 1}
    assert len(st.meta["model_sha256"]) == 64
    # the settings registry describes the committed window
    assert reg["window"]["N"] == N and reg["probe"]["n"] == (0 if st.probe_y is None else len(st.probe_y))
    with gzip.open(d / "trajectories.jsonl.gz", "rt") as f:
        assert [json.loads(line)["index"] for line in f] == st.meta["indices"]


def _records(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _stored_label_items(name: str) -> list[tuple[dict, object, int]]:
    """(round record or probe record, problem, stored label) of every plan a window's arrays label."""
    cfg = json.loads((REAL / name / "config.json").read_text())
    task = get_task(cfg["dataset"])
    st = load_setting(REAL / name / "arrays.npz")
    items = [(rd, task.problem(r["split"], r["index"]), int(st.y[i, k]))
             for i, r in enumerate(_records(REAL / name / "trajectories.jsonl.gz")) for k, rd in enumerate(r["rounds"])]
    probe = REAL / (cfg.get("probe_from") or name) / "probe.jsonl.gz"
    if st.probe_y is not None and probe.exists():
        items += [(r, task.problem(r["split"], r["index"]), int(v)) for r, v in zip(_records(probe), st.probe_y)]
    return items


def _replay_stored_sandbox_verdicts(monkeypatch, name: str) -> None:
    """Make MBPP's label batches answer from the window's stored labels: the same code on the same tests
    gets its stored verdict, any other code still runs in the sandbox. The sandbox itself is checked by
    :func:`test_a_sample_of_mbpp_labels_reruns_in_the_sandbox`."""
    verdicts: dict[tuple, int] = {}
    for rd, problem, label in _stored_label_items(name):
        if isinstance(rd.get("answer"), str):
            key = (rd["answer"], tuple(problem.answer.tests))
            assert verdicts.setdefault(key, label) == label, f"{name}: one code, two stored labels ({problem.index})"

    def run_tests(items, rule=mbpp.LABEL_RULE, **options):
        assert rule is mbpp.LABEL_RULE, "labels run under the label rule"
        out: list = [None] * len(items)
        fresh = []
        for i, (code, _imports, tests) in enumerate(items):
            label = verdicts.get((code, tuple(tests)))
            if label is None:
                fresh.append(i)
            else:
                out[i] = sandbox.TestOutcome(bool(label), "" if label else "stored label: a test failed")
        for i, res in zip(fresh, real_run_tests([items[i] for i in fresh], rule=rule, **options)):
            out[i] = res
        return out

    real_run_tests = mbpp.run_tests
    monkeypatch.setattr(mbpp, "run_tests", run_tests)


@pytest.mark.parametrize("name", COMMITTED)
def test_labels_rederive_from_stored_text(name, tmp_path, monkeypatch):
    """Relabel the committed text (final .gz files only): the arrays file comes out byte-identical.

    Guards the whole relabeling path (vote parsing into S, answer -> label order, the probe and its
    owner, the window's meta, the gzip bytes). MBPP's sandboxed unit tests answer from the stored labels
    of the same code (the sandbox run of a sample is the next test's job); a code string the stored
    records do not hold still runs in the sandbox, so a changed answer extraction is labeled for real."""
    src = REAL / name
    cfg = from_stored(json.loads((src / "config.json").read_text()))
    if cfg.dataset == "mbpp":
        _replay_stored_sandbox_verdicts(monkeypatch, name)
    work = tmp_path / name
    work.mkdir()
    for f in ("config.json", "run_meta.json"):
        shutil.copy(src / f, work / f)
    for final, part in (("trajectories.jsonl.gz", "trajectories.part.jsonl"), ("probe.jsonl.gz", "probe.part.jsonl")):
        if (src / final).exists():
            (work / part).write_bytes(gzip.decompress((src / final).read_bytes()))
    if cfg.probe_from:  # the probe is shared: rebuild it from its owner's final file
        owner = tmp_path / cfg.probe_from
        owner.mkdir(exist_ok=True)
        shutil.copy(REAL / cfg.probe_from / "config.json", owner / "config.json")
        (owner / "probe.part.jsonl").write_bytes(gzip.decompress((REAL / cfg.probe_from / "probe.jsonl.gz").read_bytes()))
    assert finalize_setting(RunPaths(tmp_path, name)) == "complete"
    assert (work / "arrays.npz").read_bytes() == (src / "arrays.npz").read_bytes()
    assert (work / "trajectories.jsonl.gz").read_bytes() == (src / "trajectories.jsonl.gz").read_bytes()
    new, old = load_setting(work / "arrays.npz"), load_setting(src / "arrays.npz")
    np.testing.assert_array_equal(new.S, old.S)  # (implied by the bytes; kept as the readable statement)
    np.testing.assert_array_equal(new.probe_y, old.probe_y)


MBPP_WINDOWS = [n for n in COMMITTED if json.loads((REAL / n / "config.json").read_text())["dataset"] == "mbpp"]


@pytest.mark.parametrize("name", MBPP_WINDOWS)
def test_a_sample_of_mbpp_labels_reruns_in_the_sandbox(name):
    """A fixed sample of each MBPP window's stored plans, labeled for real (bubblewrap sandbox, label rule,
    every hash seed): the labels equal the committed ones. Guards what the relabel test replays from the
    stored labels: a sandbox, test-harness or label-rule regression changes a sampled label. The sample
    takes plans of both labels that carry code, so every one of them runs in the sandbox."""
    rng = np.random.default_rng(sum(map(ord, name)))
    items = [(rd, p, y) for rd, p, y in _stored_label_items(name) if isinstance(rd.get("answer"), str)]
    sample = []
    for label in (1, 0):
        pool = [it for it in items if it[2] == label]
        assert len(pool) >= SANDBOX_SAMPLE, f"{name}: fewer than {SANDBOX_SAMPLE} plans labeled {label} carry code"
        sample += [pool[i] for i in rng.choice(len(pool), SANDBOX_SAMPLE, replace=False)]
    labels = get_task("mbpp").label_rounds([(rd, p) for rd, p, _ in sample])
    assert labels == [y for _, _, y in sample]


@pytest.mark.chain
def test_committed_real_settings_replay_without_a_model(chain_results, tmp_path):
    """``make`` runs 01..05 on the committed arrays (the real windows of CHAIN_SUBSET): no engine, no model,
    only the .venv. Replay of No repair / Fixed K=5 is the committed labels' round-0 / round-5 validity."""
    real = [n for n in CHAIN_SUBSET if n in COMMITTED]
    assert len(real) >= 3
    for n in real:
        stats = json.loads((chain_results / n / "stats.json").read_text())
        table = {r["policy"]: r for r in stats["policy_table"]}
        st = load_setting(REAL / n / "arrays.npz")
        # replay of No repair is the round-0 validity of the committed labels, exactly
        assert table["No repair"]["V"] == pytest.approx(st.y[:, 0].mean())
        assert table["Fixed K=5"]["V"] == pytest.approx(st.y[:, 5].mean())
        assert {"VRR-Stop", "VRR-Guard", "TPM reference"} <= set(table)
    # App. D: exactly the Self-Refine / Reflexion windows, with their fixed budget = the round-K_max labels
    rows = vrr.report.table_iterative_feedback(vrr.report.Results(chain_results, real), tmp_path / "tables")
    styles = {n: json.loads((REAL / n / "config.json").read_text())["repair_style"] for n in real}
    expected = [n for n in real if styles[n] in ("self-refine", "reflexion")]
    labels = {n: json.loads((chain_results / n / "calibration.json").read_text())["loop_dynamics"]["label"]
              for n in real}
    assert sorted(r["setting"] for r in rows) == sorted(labels[n] for n in expected)
    assert any(styles[n] == "re-solve" for n in real) and 0 < len(rows) < len(real)
    by_label = {r["setting"]: r for r in rows}
    for n in expected:
        assert by_label[labels[n]]["V_fixed"] == pytest.approx(load_setting(REAL / n / "arrays.npz").y[:, -1].mean())
    assert (tmp_path / "tables" / "iterative_feedback.csv").read_text().count("\n") == len(rows) + 1
