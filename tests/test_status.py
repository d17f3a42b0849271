"""``python -m vrr status``: counts, cost and interim labels of a run, read while a generator may be writing it.

Runs come from the package's fake engine, whose semantics give the labels in closed form: even indices start
valid, every repair flips validity, and a valid plan gets 2 of 4 accepting votes, an invalid one 1 of 4.
"""
import json
import math
import re
import warnings
from pathlib import Path

import pytest

from vrr.chain import main
from vrr.label import finalize_setting
from vrr.loop import store
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate
from vrr.loop.tasks import get_task
from vrr.report.status import format_status, run_status
from vrr.settings import SettingConfigError, load_config

TASK = get_task("gsm8k")


def small_cfg(setting="t_fav", **over):
    o = {"window.N": 10, "window.start": 0, "K_max": 2, "M": 4, "engine.batch_size": 4, "probe.split": "train",
         "probe.start": 0, "probe.n": 6, "probe.M": 6}
    o.update(over)
    return run_config(load_config("gsm8k_cpu_favorable", overrides=o), setting=setting)


def files_of(run_dir):
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


def test_labels_of_a_partial_run_in_closed_form(tmp_path):
    cfg = small_cfg()
    paths = generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, limit=6 + 4, progress=False)
    st = run_status(paths, cfg)
    assert st["instances"] == {"done": 4, "total": 10, "split": "test", "start": 0}
    assert (st["probe"]["done"], st["probe"]["total"]) == (6, 6)
    lab = st["labels"]
    # instances 0..3: initial validity 1 0 1 0, flipped by each of the two repairs
    assert lab["N"] == 4 and lab["validity_by_round"] == [0.5, 0.5, 0.5]
    assert (lab["rho0"], lab["rho1"], lab["J"]) == pytest.approx((1 / 4, 1 - 2 / 4, 1 - 1 / 4 - 2 / 4))
    assert lab["J_all_rounds"] == pytest.approx(0.25)
    assert lab["first_repair"] == {"n_fixed": 2, "n_invalid_before": 2, "n_broken": 2, "n_valid_before": 2}
    assert lab["every_repair"] == {"n_fixed": 4, "n_invalid_before": 4, "n_broken": 4, "n_valid_before": 4}
    assert (lab["alpha"], lab["beta"]) == (1.0, 1.0)
    assert lab["acceptance_by_round"] == pytest.approx([1.5 / 4] * 3)
    votes = lab["initial_votes"]
    assert votes["valid"]["observed"] == [0, 0, 2, 0, 0] and votes["invalid"]["observed"] == [0, 2, 0, 0, 0]
    # rho1 = 1/2: two valid plans times Binomial(4, 1/2)
    assert votes["valid"]["binomial"] == pytest.approx([2 * math.comb(4, k) / 16 for k in range(5)])
    text = format_status(st)
    assert "instances  4 of 10 (test 0..9)" in text and "fixes 2 of 2" in text and "breaks 4 of 4" in text
    assert "valid   0 0 2 0 0  /  0.1 0.5 0.8 0.5 0.1" in text


def test_reads_beside_a_running_generator_and_writes_nothing(tmp_path):
    """Under the generator's lock, with a torn last line mid-append: the status skips the line, repairs nothing,
    and leaves every file of the run as it was."""
    cfg = small_cfg()
    paths = generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, limit=6 + 4, progress=False)
    with open(paths.traj_part, "ab") as f:
        f.write(b'{"index": 4, "rounds": [')
    before = files_of(paths.dir)
    with store.generation_lock(paths), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        st = run_status(paths, cfg)
    assert st["instances"]["done"] == 4
    assert any("torn last line" in str(w.message) and "skipped" in str(w.message) for w in caught)
    assert files_of(paths.dir) == before
    assert not store.rejected_path(paths.traj_part).exists()


def test_the_stored_window_wins_and_remaining_time_uses_the_last_machine_kind(tmp_path, capsys):
    """The CLI resolves the setting's YAML (N=100), but the run's config.json (N=10) is what the generator works
    to; remaining time is at the rate of the last session's machine kind."""
    cfg = small_cfg(**{"probe.n": 0})
    paths = generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, limit=4, progress=False)
    bf16 = {"backend": "vllm-cpu", "cpu_kind": "AVX512-BF16", "dtype": "bfloat16", "cores": 2}
    fp32 = {"backend": "vllm-cpu", "cpu_kind": "AVX2", "dtype": "float32", "cores": 2}
    meta = json.loads(paths.meta.read_text())
    meta["sessions"] = [{"id": "a", "instances": 2, "probe_plans": 0, "seconds": 100.0, "machine": fp32},
                        {"id": "b", "instances": 1, "probe_plans": 0, "seconds": 20.0, "machine": bf16},
                        {"id": "c", "instances": 1, "probe_plans": 0, "seconds": 80.0, "machine": fp32,
                         "engine_load_seconds": 9.0}]
    paths.meta.write_text(json.dumps(meta))
    assert main(["status", "gsm8k_cpu_favorable", "--run-name", "t_fav", "--out-root", str(tmp_path),
                 "--json", "--no-labels"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["instances"]["total"] == 10 and st["instances"]["done"] == 4 and st["labels"] is None
    assert st["left"]["machine"] == "vllm-cpu AVX2 float32"
    assert st["left"]["instance_seconds"] == pytest.approx(6 * 180.0 / 3)
    assert (st["engine_seconds"], st["load_seconds"]) == (200.0, 9.0)
    assert [m["seconds_per_instance"] for m in st["machines"]] == pytest.approx([60.0, 20.0])


def test_a_shared_probe_is_counted_from_its_owner(tmp_path):
    owner = small_cfg()
    generate(owner, engine=FakeEngine(TASK), out_root=tmp_path, limit=3, phases=("probe",), progress=False)
    cfg = small_cfg("t_pm", **{"probe.from": "t_fav", "window.N": 4})
    paths = generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, phases=("traj",), progress=False)
    st = run_status(paths, cfg, labels=False)
    source = st["probe"]["source"]
    assert {k: v for k, v in st["probe"].items() if k != "source"} == {"done": 3, "total": 6, "from": "t_fav",
                                                                      "missing": ""}
    assert source == {"owner": "t_fav", "folder": str((tmp_path / "t_fav").resolve()), "generator": cfg.model,
                      "judge": cfg.judge_model, "own": False}
    assert st["left"]["probe_plans"] == 0  # the owner's run generates them
    assert f"borrowed from t_fav, made by {cfg.model} and voted on by {cfg.judge_model}" in format_status(st)
    assert finalize_setting(paths, cfg) == "partial"  # the window waits for the owner's probe


def test_a_run_not_started_reports_its_window(tmp_path):
    cfg = small_cfg()
    st = run_status(store.RunPaths(tmp_path, cfg.setting), cfg)
    assert not st["started"] and st["instances"]["done"] == 0 and st["instances"]["total"] == 10
    assert st["labels"] is None and math.isnan(st["left"]["instance_seconds"])
    assert "nothing generated yet" in format_status(st)
    assert not (tmp_path / cfg.setting).exists()


def test_a_simulated_setting_is_refused_naming_the_field():
    with pytest.raises(SettingConfigError, match=r"sim_qwen3b_favorable\.yaml: field 'kind': only real settings"):
        main(["status", "sim_qwen3b_favorable"])


def readme_and_committed_status(setting):
    """The README with the reading behind its findings (docs/findings.md) as one line of text, and
    `python -m vrr status <setting>` on the committed run."""
    repo = Path(__file__).resolve().parent.parent
    readme = " ".join(" ".join((repo / page).read_text() for page in ("README.md", "docs/findings.md")).split())
    cfg = run_config(load_config(setting))
    return readme, run_status(store.RunPaths(store.DEFAULT_OUT_ROOT, cfg.setting), cfg)


def printed(value, text):
    """`value` as the README prints it, at the precision of `text` ('0.27' -> two decimals)."""
    return f"{value:.{len(text.partition('.')[2])}f}"


@pytest.mark.parametrize("setting", ["gsm8k_cpu_program_favorable", "gsm8k_cpu_program_pmstress"])
def test_the_readme_window_reading_is_what_status_prints(setting):
    """The README's labeled J, rho, first-repair counts and validity by round of a GSM8K program window are
    `python -m vrr status <setting>` on the committed run."""
    readme, st = readme_and_committed_status(setting)
    m = re.search("`" + re.escape(setting) + r"` \(.*?\$\\hat J\$ is ([\d.]+) \(\$\\hat\\rho_0\$=([\d.]+), "
                  r"\$\\hat\\rho_1\$=([\d.]+)\), the first repair fixes (\d+) of (\d+) invalid plans and breaks "
                  r"(\d+) of (\d+) valid ones.*?validity by round is ((?:\.\d\d ?)+) \(([a-z ]+)\)", readme)
    assert m, f"README: the reading of {setting} is not where this test expects it"
    lab, first = st["labels"], st["labels"]["first_repair"]
    assert [m[1], m[2], m[3]] == [printed(lab["J"], m[1]), printed(lab["rho0"], m[2]), printed(lab["rho1"], m[3])]
    assert [int(x) for x in m.groups()[3:7]] == [
        first["n_fixed"], first["n_invalid_before"], first["n_broken"], first["n_valid_before"]]
    assert m[8].split() == [f"{q:.2f}".replace("0.", ".", 1) for q in lab["validity_by_round"]]
    assert m[9] == lab["shape"]


@pytest.mark.parametrize("setting", ["gsm8k_cpu_program_favorable", "gsm8k_cpu_program_pmstress"])
def test_the_readme_vote_correlation_claim_is_what_status_prints(setting):
    """The README's count of valid initial plans with no accepting vote, and what independent votes expect,
    are `python -m vrr status <setting>` on the committed run."""
    readme, st = readme_and_committed_status(setting)
    m = re.search(r"(\d+) of the (\d+) valid initial plans get 0 of (\d+) accepting votes[^`]*?where independent "
                  r"votes(?: at \$\\hat\\rho_1\$=([\d.]+) \(Eq\. 3\))? expect ([\d.]+)(?:, and (\d+) get all \d+ where "
                  r"they expect ([\d.]+))? \(`python -m vrr status " + re.escape(setting) + "`", readme)
    assert m, f"README: the vote-correlation sentence of {setting} is not where this test expects it"
    lab = st["labels"]
    valid = lab["initial_votes"]["valid"]
    assert [int(m[1]), int(m[2]), int(m[3])] == [valid["observed"][0], valid["n"], lab["initial_votes"]["M"]]
    assert m[5] == f"{valid['binomial'][0]:.1f}"
    if m[4] is not None:
        assert m[4] == f"{lab['rho1']:.3f}"
    if m[6] is not None:
        assert [int(m[6]), m[7]] == [valid["observed"][-1], f"{valid['binomial'][-1]:.1f}"]


def test_the_readme_says_which_stress_plans_calibrated_vrr_stop_repairs(committed):
    """The README: on the GSM8K program stress window, VRR-Stop calibrated by the paper's label-free EM repairs the
    initial plans with 0 or 1 accepting votes, which hold the valid plans that `vrr status` counts at 0 and 1
    accepts (45 + 19 = 64)."""
    from dataclasses import replace

    from vrr.policies import fit_calibration, rules

    setting = "gsm8k_cpu_program_pmstress"
    readme, st = readme_and_committed_status(setting)
    m = re.search(r"VRR-Stop repairs the initial plans with 0 or (\d+) accepting votes, which hold (\d+) of the (\d+) "
                  r"valid ones \((\d+) and (\d+) in the status table\)", readme)
    assert m, "README: the sentence on the plans VRR-Stop repairs is not where this test expects it"
    data, _, config, _ = committed(setting)
    label_free = fit_calibration(data, replace(config, method="binomial_em"))
    repaired = rules.vrr_stop(data.S, data.M, tau=config.tau, **label_free.as_kwargs()).rounds_used > 0
    first_votes, first_valid = data.S[:, 0], data.y[:, 0].astype(bool)
    assert set(first_votes[repaired]) == set(range(int(m[1]) + 1))
    assert not repaired[first_votes > int(m[1])].any()
    observed = st["labels"]["initial_votes"]["valid"]["observed"]
    assert [int(m[4]), int(m[5])] == observed[:2] and int(m[3]) == first_valid.sum()
    assert int(m[2]) == (repaired & first_valid).sum() == int(m[4]) + int(m[5])


def test_an_out_root_that_is_a_file_is_an_error_not_an_empty_run(tmp_path):
    """`--out-root` naming a file cannot hold a run: exit 2 naming the file, not "nothing generated yet"."""
    path = tmp_path / "not_a_folder"
    path.write_text("x")
    with pytest.raises(store.RunStoreError, match=f"{path}: is a file, not a folder"):
        main(["status", "mbpp_cpu_favorable", "--out-root", str(path), "--no-labels"])
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "vrr", "status", "mbpp_cpu_favorable", "--out-root", str(path),
                           "--no-labels"], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2 and f"{path}: is a file, not a folder" in proc.stderr
