"""The setting YAML is the whole protocol: every file loads, every real setting resolves to exactly the
generation config that runs (field by field, and against the committed runs' config.json), and bad
files fail with an error that names the file and the field."""
import dataclasses
import json
from pathlib import Path

import pytest

from vrr.loop.config import NON_PROTOCOL_KEYS, WINDOW_KEYS, RunConfig, from_stored, protocol_differences, run_config
from vrr.loop.verifiers import JUDGE_MAX_TOKENS, VERIFIER_MAX_TOKENS
from vrr.settings import SETTINGS_DIR, SettingConfigError, list_settings, load_config

REPO = Path(__file__).resolve().parent.parent

# RunConfig field -> where it comes from in the setting (dotted path). Every field must be listed:
# a field missing here is a protocol value the YAML does not control.
FROM_YAML = {
    "dataset": "task", "model": "models.generator", "judge_model": "models.judge", "repairer_model": "models.repairer",
    "verifier": "verifier.kind", "backend": "engine.backend", "split": "window.split", "start": "window.start",
    "n": "window.N", "K_max": "K_max", "M": "M", "judge_style": "verifier.style", "judge_max_tokens": "verifier.max_tokens",
    "repair_style": "repair.style", "repair_mode": "repair.mode", "gen_temperature": "temperatures.generate",
    "judge_temperature": "temperatures.judge", "repair_temperature": "temperatures.repair",
    "gen_max_tokens": "max_tokens.generate", "repair_max_tokens": "max_tokens.repair", "perturb": "perturbation.edit",
    "perturb_from_round": "perturbation.from_round", "perturb_to_round": "perturbation.to_round", "seed": "seed",
    "batch_size": "engine.batch_size", "max_model_len": "max_tokens.context", "probe_split": "probe.split",
    "probe_start": "probe.start", "probe_n": "probe.n", "probe_votes": "probe.M", "probe_from": "probe.from",
}
NOT_FROM_YAML = {"setting", "notes"}  # the output name, free text


def _get(cfg, dotted):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def test_every_settings_file_loads_and_is_named_after_its_file():
    names = list_settings()
    assert len(names) >= 20
    for name in names:
        cfg = load_config(name)
        assert cfg["name"] == name and Path(cfg["_path"]).stem == name


def test_the_map_covers_every_run_config_field():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(FROM_YAML) | NOT_FROM_YAML == fields


@pytest.mark.parametrize("name", list_settings(kind="real"))
def test_real_setting_resolves_to_the_generation_config_field_by_field(name):
    cfg = load_config(name)
    rc = run_config(cfg)
    for field, path in FROM_YAML.items():
        want = _get(cfg, path)
        if field == "judge_max_tokens" and want is None:   # null: the verifier kind's or the style's default
            want = VERIFIER_MAX_TOKENS.get(cfg["verifier"]["kind"]) or JUDGE_MAX_TOKENS[cfg["verifier"]["style"]]
        assert getattr(rc, field) == want, f"{name}: {field} != {path}"
    assert rc.setting == name


@pytest.mark.parametrize("name", [p.parent.name for p in sorted((REPO / "data" / "real").glob("*/config.json"))])
def test_committed_runs_were_generated_with_what_their_yaml_says(name):
    """The YAML of a committed run resolves to the protocol recorded in its config.json."""
    stored = json.loads((REPO / "data" / "real" / name / "config.json").read_text())
    rc = run_config(load_config(name))
    assert protocol_differences(from_stored(stored), rc) == []
    for key, value in vars(from_stored(stored)).items():   # as read: an unset budget is the one the run used
        if key not in WINDOW_KEYS | NON_PROTOCOL_KEYS | {"notes"}:
            assert getattr(rc, key) == value, key
    assert stored["n"] == rc.n  # the committed window is the YAML's window


def test_gpu_setting_with_a_perturbation_regime_perturbs():
    """The earlier preset table ran every gpu_* setting with the PM-stress protocol, favorable included."""
    fav, pm = run_config(load_config("gpu_qwen3b_favorable")), run_config(load_config("gpu_qwen3b_pmstress"))
    assert fav.perturb == "none" and fav.repair_temperature == 0.7
    assert pm.perturb == "auto" and pm.repair_temperature == 1.0 and pm.n == 500 and pm.probe_n == 300


def test_include_merges_mapping_by_mapping():
    fav, pm = load_config("gsm8k_cpu_favorable"), load_config("gsm8k_cpu_pmstress")
    assert pm["temperatures"] == {**fav["temperatures"], "repair": 1.0}
    assert pm["models"] == fav["models"] and pm["window"] == fav["window"]
    assert pm["probe"]["from"] == "gsm8k_cpu_favorable" and fav["probe"]["from"] is None


def test_overrides_are_validated_like_the_file():
    assert load_config("gsm8k_cpu_favorable", overrides={"window.N": 7})["window"]["N"] == 7
    with pytest.raises(SettingConfigError, match=r"gsm8k_cpu_favorable.yaml: field 'window.N': must be an integer"):
        load_config("gsm8k_cpu_favorable", overrides={"window.N": "many"})
    with pytest.raises(SettingConfigError, match=r"field 'models.judgee': unknown key"):
        load_config("gsm8k_cpu_favorable", overrides={"models.judgee": "x"})


def _write(tmp_path, name, text, base=None):
    if base:
        (tmp_path / "base.yaml").write_text((SETTINGS_DIR / f"{base}.yaml").read_text().replace(f"name: {base}\n", ""))
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("body, field, message", [
    ("include: base.yaml\nname: s\nwindow: {N: 10}\nM: true\n", "M", "must be an integer"),
    ("include: base.yaml\nname: s\nwindow: {N: 10}\nK_max: 0\n", "K_max", "must be >= 1"),
    ("include: base.yaml\nname: s\nwindow: {N: 10}\nverbose: 1\n", "verbose", "unknown key"),
    ("include: base.yaml\nname: s\nwindow: {N: 10}\nverifier: {style: shout}\n", "verifier.style", "must be one of"),
    ("include: base.yaml\nname: s\nwindow: {N: 10}\nparams: {rho0: 0.1}\n", "params", "not used by real settings"),
    ("include: base.yaml\nname: other\nwindow: {N: 10}\n", "name", "must match the file name"),
    ("include: base.yaml\nname: ../../escape\nwindow: {N: 10}\n", "name", "plain name"),
    ("include: base.yaml\nname: s\nwindow: {N: 10}\nM: 8\nM: 9\n", "<file>", "duplicate key"),
    ("include: missing.yaml\nname: s\n", "include", "no such file"),
    ("include: base.yaml\nname: s\nperturbation: {regime: pm_stress, edit: none}\n", "perturbation.edit", "needs an edit"),
    ("include: base.yaml\nname: s\nprobe: {split: test, start: 50}\n", "probe.start", "disjoint"),
])
def test_bad_settings_name_the_file_and_the_field(tmp_path, body, field, message):
    path = _write(tmp_path, "s", body, base="gsm8k_cpu_favorable")
    with pytest.raises(SettingConfigError) as info:
        load_config(path)
    assert info.value.field == field and message in info.value.problem and str(path) in str(info.value)


def test_a_setting_loaded_again_sees_its_files_as_they_are_now(tmp_path):
    """load_config keeps each file's parse (every notebook loads its setting again): a changed base or setting is
    read anew, a file that turned bad is an error again, and a caller who edits what it got changes nobody else's."""
    path = _write(tmp_path, "s", "include: base.yaml\nname: s\nwindow: {N: 10}\n", base="gsm8k_cpu_favorable")
    first = load_config(path)
    first["window"]["N"] = 999
    first["verifier"]["style"] = "edited"
    again = load_config(path)
    assert again["window"]["N"] == 10 and again["verifier"]["style"] != "edited"
    path.write_text("include: base.yaml\nname: s\nwindow: {N: 12}\n")
    assert load_config(path)["window"]["N"] == 12
    base = tmp_path / "base.yaml"
    base.write_text(base.read_text().replace("\nM: 8\n", "\nM: 7\n"))
    assert load_config(path)["M"] == 7
    path.write_text("include: base.yaml\nname: s\nwindow: {N: 12}\nM: true\n")
    for _ in range(2):
        with pytest.raises(SettingConfigError, match="must be an integer"):
            load_config(path)


def test_include_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("include: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\n")
    with pytest.raises(SettingConfigError, match="include cycle"):
        load_config(tmp_path / "a.yaml")


def test_simulated_setting_needs_its_parameters(tmp_path):
    text = (SETTINGS_DIR / "sim_qwen3b_favorable.yaml").read_text()
    path = tmp_path / "sim_qwen3b_favorable.yaml"
    path.write_text(text.replace("include: base/simulated.yaml", f"include: {SETTINGS_DIR}/base/simulated.yaml")
                    .replace("  pi: 0.74\n", ""))
    with pytest.raises(SettingConfigError, match="field 'params.pi': missing"):
        load_config(path)


# --------------------------------------------------------------------------- hostile settings
def _refused(path, field, words=""):
    with pytest.raises(SettingConfigError) as info:
        load_config(path)
    assert info.value.field == field, str(info.value)
    assert words in info.value.problem and str(path) in str(info.value), str(info.value)
    assert len(str(info.value)) < 1000, "errors truncate what they quote"
    return info.value


def test_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)]
    path = _write(tmp_path, "s", "include: base.yaml\nname: s\n" + "\n".join(lines) + "\ndescription: *a6\n",
                  base="gsm8k_cpu_favorable")
    _refused(path, "<file>", "anchors and aliases")


def test_an_anchor_alone_is_refused(tmp_path):
    path = _write(tmp_path, "s", "include: base.yaml\nname: s\nwindow: &w {N: 10}\n", base="gsm8k_cpu_favorable")
    _refused(path, "<file>", "anchors and aliases")


def test_errors_truncate_the_values_they_quote(tmp_path):
    path = _write(tmp_path, "s", "include: base.yaml\nname: s\ndescription: [" + ", ".join(["123456"] * 20000) + "]\n",
                  base="gsm8k_cpu_favorable")
    err = _refused(path, "description", "must be a string")
    assert "..." in err.problem


@pytest.mark.parametrize("body, field", [
    ("include: base.yaml\nname: s\n1: 2\n", "1"),
    ("include: base.yaml\nname: s\nwindow: {N: 10, 3: x}\n", "window.3"),
    ("include: base.yaml\nname: s\nnull: 2\n", "None"),
])
def test_non_string_keys_name_the_file_and_the_field(tmp_path, body, field):
    path = _write(tmp_path, "s", body, base="gsm8k_cpu_favorable")
    _refused(path, field, "key must be a name")


def test_unhashable_keys_are_a_clear_error(tmp_path):
    path = _write(tmp_path, "s", "include: base.yaml\nname: s\n? [a, b]\n: 1\n", base="gsm8k_cpu_favorable")
    _refused(path, "<file>", "key must be a plain name")


def test_deep_nesting_is_a_clear_error(tmp_path):
    path = _write(tmp_path, "s", "include: base.yaml\nname: s\ndescription: " + "[" * 5000 + "]" * 5000 + "\n",
                  base="gsm8k_cpu_favorable")
    _refused(path, "<file>", "nested deeper")


def test_a_huge_window_with_an_overlapping_probe_is_refused_at_once(tmp_path):
    body = "include: base.yaml\nname: s\nwindow: {N: 1000000000000000}\nprobe: {split: test, start: 5, n: 10}\n"
    _refused(_write(tmp_path, "s", body, base="gsm8k_cpu_favorable"), "window.N", "<= 1000000")
    # within the bounds the disjointness check is arithmetic: the largest windows are checked at once
    body = "include: base.yaml\nname: s\nwindow: {N: 1000000, start: 1000000}\nprobe: {split: test, start: 0, n: 1000000}\n"
    assert load_config(_write(tmp_path, "s", body, base="gsm8k_cpu_favorable"))["probe"]["n"] == 10 ** 6
    body = "include: base.yaml\nname: s\nwindow: {N: 1000000, start: 1000000}\nprobe: {split: test, start: 1, n: 1000000}\n"
    _refused(_write(tmp_path, "s", body, base="gsm8k_cpu_favorable"), "probe.start", "disjoint")


@pytest.mark.parametrize("line, field, words", [
    ("temperatures: {generate: .nan}", "temperatures.generate", "finite"),
    ("temperatures: {judge: .inf}", "temperatures.judge", "finite"),
    ("temperatures: {repair: 1" + "0" * 400 + "}", "temperatures.repair", "finite"),
    ("temperatures: {repair: 11.0}", "temperatures.repair", "<= 10"),
    ("calibration: {em_tol: .nan}", "calibration.em_tol", "finite"),
    ("window: {N: 1000000000000000}", "window.N", "<="),
    ("window: {N: 1.0e+15}", "window.N", "must be an integer"),
    ("M: 1000000000000", "M", "<= 1024"),
    ("seed: " + str(2 ** 80), "seed", "<= 4294967295"),
    ("K_max: 1001", "K_max", "<= 1000"),
    ("probe: {M: 2000}", "probe.M", "<= 1024"),
    ("max_tokens: {context: 100000000}", "max_tokens.context", "<="),
    ("engine: {batch_size: 100000}", "engine.batch_size", "<="),
    ("calibration: {em_max_iter: 100000000}", "calibration.em_max_iter", "<="),
])
def test_numbers_are_finite_and_bounded(tmp_path, line, field, words):
    path = _write(tmp_path, "s", f"include: base.yaml\nname: s\n{line}\n", base="gsm8k_cpu_favorable")
    _refused(path, field, words)


def test_overrides_are_finite_and_bounded():
    with pytest.raises(SettingConfigError, match=r"field 'calibration.em_tol': must be a finite number"):
        load_config("gsm8k_cpu_favorable", overrides={"calibration.em_tol": float("nan")})
    with pytest.raises(SettingConfigError, match=r"field 'seed': must be <= "):
        load_config("gsm8k_cpu_favorable", overrides={"seed": 2 ** 80})


def test_set_with_invalid_yaml_names_the_key():
    from vrr.chain import parse_set_overrides

    assert parse_set_overrides(["window.N=7", "models.judge=x"]) == {"window.N": 7, "models.judge": "x"}
    with pytest.raises(SettingConfigError) as info:
        parse_set_overrides(["window.N=[1, 2"])
    assert info.value.path == "--set" and info.value.field == "window.N" and "not valid YAML" in info.value.problem
    with pytest.raises(SettingConfigError) as info:
        parse_set_overrides(["description=&a [1, *a]"])
    assert info.value.field == "description" and "anchors" in info.value.problem
    with pytest.raises(SettingConfigError) as info:
        parse_set_overrides(["description=" + "[" * 3000 + "]" * 3000])
    assert info.value.field == "description" and "nested" in info.value.problem
    with pytest.raises(SettingConfigError, match="dotted key"):
        parse_set_overrides(["../x=1"])


@pytest.mark.parametrize("line, field", [
    ("probe: {from: ../../..}", "probe.from"),
    ("probe: {split: ../../etc}", "probe.split"),
    ("window: {split: /etc/passwd}", "window.split"),
    ("data_dir: /etc", "data_dir"),
    ("data_dir: data/real/../../../etc", "data_dir"),
    ("data_dir: ..", "data_dir"),
])
def test_names_and_paths_stay_in_the_tree(tmp_path, line, field):
    path = _write(tmp_path, "s", f"include: base.yaml\nname: s\n{line}\n", base="gsm8k_cpu_favorable")
    _refused(path, field)


def test_an_include_outside_the_settings_is_refused_before_it_is_read(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    outside = tmp_path / "outside.yaml"
    outside.write_text("{{ not yaml: [")  # reading it would be a different error
    path = inner / "s.yaml"
    path.write_text("include: ../outside.yaml\nname: s\n")
    _refused(path, "include", "outside the settings folder")
    path.write_text("include: /etc/passwd\nname: s\n")
    _refused(path, "include", "must be a .yaml file")
    path.write_text(f"include: {outside}\nname: s\n")
    _refused(path, "include", "outside the settings folder")
    # a committed base is always reachable, and includes inside the folder still work
    path.write_text(f"include: {SETTINGS_DIR}/base/simulated.yaml\nname: s\n")
    with pytest.raises(SettingConfigError) as info:
        load_config(path)
    assert info.value.field != "include"


def test_datasets_are_found_beside_the_clone_or_through_the_variable_only(monkeypatch):
    from vrr.common.paths import REPO_ROOT, shared_data_dirs

    monkeypatch.delenv("VRR_GSM8K_DIR", raising=False)
    assert shared_data_dirs("gsm8k", env_var="VRR_GSM8K_DIR") == [REPO_ROOT.parent / "shared" / "data" / "gsm8k"]
    monkeypatch.setenv("VRR_GSM8K_DIR", "/somewhere/gsm8k")
    assert shared_data_dirs("gsm8k", env_var="VRR_GSM8K_DIR") == [Path("/somewhere/gsm8k"),
                                                                  REPO_ROOT.parent / "shared" / "data" / "gsm8k"]


@pytest.mark.parametrize("args, field", [(["--run-name", "../x"], "run_name"), (["--set", "M=[1"], "'M'"),
                                         (["--set", "window.N=.nan"], "window.N")])
def test_the_command_line_names_a_bad_argument_in_one_line(args, field):
    """``python -m vrr`` turns an input error into one line naming the argument (exit 2), not a traceback."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "vrr", "resolve", "gsm8k_cpu_favorable", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ") and field in out.stderr


def test_a_missing_dataset_whose_hub_fallback_fails_names_the_folders_and_the_cause(tmp_path):
    """Offline (or without the ``datasets`` package) the hub fallback fails: the error is a FileNotFoundError
    naming where the local copy was looked for and why the hub gave nothing, not the fallback's own traceback."""
    from vrr.loop.tasks.base import read_jsonl_rows

    def offline():
        raise ConnectionError("no route to the hub")

    missing = tmp_path / "gsm8k" / "test.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        read_jsonl_rows("gsm8k", "test", "VRR_GSM8K_DIR", missing, allow_hub=True, from_hub=offline)
    assert str(missing) in str(info.value) and "ConnectionError: no route to the hub" in str(info.value)
    assert isinstance(info.value.__cause__, ConnectionError)
    with pytest.raises(FileNotFoundError, match="no local gsm8k test.jsonl") as info:
        read_jsonl_rows("gsm8k", "test", "VRR_GSM8K_DIR", missing, allow_hub=False, from_hub=offline)
    assert "hub" not in str(info.value)


def test_the_resampling_control_draws_from_the_problem_s_own_statement():
    """mbpp_cpu_loop_resample edits nothing: every round of the control is a first draft of the unedited problem
    (the prompt mismatch is the repairer's, and the control has no repairer); a regime that perturbs still needs an
    edit (the test above)."""
    from vrr.loop.config import run_config

    rc = run_config(load_config("mbpp_cpu_loop_resample"))
    assert rc.repair_mode == "resample" and rc.perturb == "none"
    assert not any(rc.perturbed_round(k) for k in range(rc.K_max + 1))
    loop = run_config(load_config("mbpp_cpu_loop"))
    assert [k for k in range(loop.K_max + 1) if loop.perturbed_round(k)] == [3, 4, 5, 6]


def test_votes_from_the_probe_need_a_probe():
    """vote_rounds 'probe' reads the probe's votes; a setting without a probe is refused, naming the field."""
    with pytest.raises(SettingConfigError, match=r"field 'calibration.vote_rounds'.*\(no probe\); vote_rounds that can: "
                                                 r"first, all"):
        load_config("sim_qwen3b_favorable", overrides={"probe.n": 0, "calibration.vote_rounds": "probe",
                                                        "calibration.method": "binomial_em"})


def test_an_unset_judge_budget_reads_as_the_one_the_run_used():
    """config.json files that leave ``judge_max_tokens`` unset ran with the style's budget of their day (verdict:
    4 tokens); a setting resolves its budget into the config, the verdict style's default now 16."""
    stored = json.loads((REPO / "data" / "real" / "gsm8k_cpu_favorable" / "config.json").read_text())
    assert stored["judge_max_tokens"] is None and from_stored(stored).judge_max_tokens == 4
    gpu = run_config(load_config("gpu_qwen3b_favorable"))
    assert load_config("gpu_qwen3b_favorable")["verifier"]["max_tokens"] is None and gpu.judge_max_tokens == 16
