"""Property-based battery of malformed inputs (hypothesis): every mutated ``.npz``, setting YAML and part
file gives either a correct load or a clear error that names the file and the field; never a silent
accept, never a bare library exception.

The battery counts what it tried and how each case ended; ``test_battery_counts`` prints them.
"""
import io
import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vrr.data import DataContractError, Setting, load_setting, save_setting
from vrr.loop.store import PartFileWarning, read_part
from vrr.settings import SETTINGS_DIR, SettingConfigError, load_config

OUTCOMES: Counter = Counter()
SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _valid_setting() -> Setting:
    rng = np.random.default_rng(0)
    y = (rng.random((12, 4)) < 0.6).astype(np.int8)
    S = rng.binomial(8, np.where(y == 1, 0.8, 0.3))
    return Setting(S=S, y=y, M=8, probe_S=rng.binomial(16, 0.5, 10), probe_M=16,
                   probe_y=(rng.random(10) < 0.5).astype(np.int8),
                   meta={"setting": "t", "M": 8, "K_max": 3, "indices": list(range(12)), "probe": {"votes": 16}})


def _expect_clear_error_or_same(path: Path, original: Setting, kind: str):
    try:
        loaded = load_setting(path)
    except DataContractError as exc:
        assert str(path) in str(exc) and "field '" in str(exc), str(exc)
        OUTCOMES[f"{kind}: clear error"] += 1
        return
    # a load that succeeds must be the original setting (e.g. only a zip timestamp was hit)
    assert np.array_equal(loaded.S, original.S) and np.array_equal(loaded.y, original.y)
    assert loaded.M == original.M and loaded.meta == original.meta
    assert np.array_equal(loaded.probe_S, original.probe_S) and loaded.probe_M == original.probe_M
    OUTCOMES[f"{kind}: correct load"] += 1


@SLOW
@given(data=st.data())
def test_byte_flipped_or_truncated_npz(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("npz") / "s.npz"
    original = _valid_setting()
    save_setting(path, original)
    raw = bytearray(path.read_bytes())
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
        kind = "npz byte flip"
    else:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
        kind = "npz truncation"
    path.write_bytes(bytes(raw))
    _expect_clear_error_or_same(path, original, kind)


FIELD_VALUES = {
    "S": st.sampled_from(["bool", "float_nan", "negative", "above_M", "1d", "shape"]),
    "y": st.sampled_from(["two", "negative", "shape", "float_half", "missing"]),
    "M": st.sampled_from([0, -3, 2.5, True, "eight", None, [8]]),
    "probe_M": st.sampled_from(["lone", 0, 3]),
    "meta": st.sampled_from(["not json", "[1, 2]", "M_disagrees", "K_disagrees", "indices_short", "probe_votes",
                             "M_bool"]),
    "extra": st.sampled_from(["unknown_key"]),
}


def _raw_arrays(setting: Setting) -> dict:
    return {"S": setting.S, "y": setting.y, "M": np.asarray(setting.M), "probe_S": setting.probe_S,
            "probe_M": np.asarray(setting.probe_M), "probe_y": setting.probe_y,
            "meta": np.asarray(json.dumps(setting.meta))}


@SLOW
@given(field=st.sampled_from(sorted(FIELD_VALUES)), data=st.data())
def test_mutated_fields_are_refused_by_name(tmp_path_factory, field, data):
    original = _valid_setting()
    arrays = _raw_arrays(original)
    how = data.draw(FIELD_VALUES[field])
    meta = dict(original.meta)
    if field == "S":
        arrays["S"] = {"bool": original.S > 4, "float_nan": np.where(original.S > 4, np.nan, 1.0),
                       "negative": original.S - 9, "above_M": original.S + 9, "1d": original.S[:, 0],
                       "shape": original.S[:, :2]}[how]
    elif field == "y":
        if how == "missing":
            del arrays["y"]
        else:
            arrays["y"] = {"two": original.y * 2, "negative": -original.y, "shape": original.y[:5],
                           "float_half": original.y * 0.5 + 0.25}[how]
    elif field == "M":
        arrays["M"] = np.asarray(how, dtype=object) if how is None or isinstance(how, list) else np.asarray(how)
    elif field == "probe_M":
        if how == "lone":
            del arrays["probe_S"], arrays["probe_y"]
        else:
            arrays["probe_M"] = np.asarray(how)
    elif field == "meta":
        if how in ("not json", "[1, 2]"):
            arrays["meta"] = np.asarray(how)
        else:
            key, value = {"M_disagrees": ("M", 9), "K_disagrees": ("K_max", 5), "indices_short": ("indices", [0, 1]),
                          "probe_votes": ("probe", {"votes": 8}), "M_bool": ("M", True)}[how]
            meta[key] = value
            arrays["meta"] = np.asarray(json.dumps(meta))
    else:
        arrays["surprise"] = np.arange(3)
    path = tmp_path_factory.mktemp("field") / "s.npz"
    buf = io.BytesIO()
    try:
        np.savez(buf, **arrays)
    except ValueError:  # numpy refuses to write an object array: nothing reaches the loader
        OUTCOMES["field mutation: not writable"] += 1
        return
    path.write_bytes(buf.getvalue())
    with pytest.raises(DataContractError) as info:
        load_setting(path)
    assert str(path) in str(info.value) and "field '" in str(info.value)
    OUTCOMES["field mutation: clear error"] += 1


SCALARS = st.one_of(st.booleans(), st.integers(-5, 10 ** 6), st.floats(allow_nan=True), st.text(max_size=8),
                    st.none(), st.lists(st.integers(), max_size=2), st.just({"nested": 1}))


def _paths(cfg, prefix=""):
    for key, value in cfg.items():
        if isinstance(value, dict):
            yield from _paths(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


BASE = yaml.safe_load((SETTINGS_DIR / "gsm8k_cpu_favorable.yaml").read_text())
LEAVES = sorted(_paths(BASE))


@SLOW
@given(leaf=st.sampled_from(LEAVES + ["<new key>", "<duplicate>"]), value=SCALARS)
def test_mutated_setting_yaml_loads_correctly_or_names_file_and_field(tmp_path_factory, leaf, value):
    folder = tmp_path_factory.mktemp("yaml")
    path = folder / "gsm8k_cpu_favorable.yaml"
    text = (SETTINGS_DIR / "gsm8k_cpu_favorable.yaml").read_text()
    cfg = yaml.safe_load(text)
    if leaf == "<duplicate>":
        text = text + "M: 8\n"
    elif leaf == "<new key>":
        cfg["verbosity"] = value
        text = yaml.safe_dump(cfg)
    else:
        node = cfg
        *parents, last = leaf.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
        text = yaml.safe_dump(cfg)
    path.write_text(text)
    try:
        loaded = load_config(path)
    except SettingConfigError as exc:
        assert str(path) in str(exc) and exc.field, str(exc)
        OUTCOMES["yaml: clear error"] += 1
        return
    # accepted: then the value really is one the schema allows, and it was read as written
    assert leaf not in ("<duplicate>", "<new key>")
    node = loaded
    for part in leaf.split("."):
        node = node[part]
    assert node == value or (isinstance(value, int) and not isinstance(value, bool) and node == float(value))
    assert not isinstance(value, bool) or isinstance(node, bool)
    OUTCOMES["yaml: correct load"] += 1


@SLOW
@given(bad_lines=st.lists(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b), min_size=1, max_size=4),
       positions=st.lists(st.integers(0, 8), min_size=4, max_size=4), torn=st.booleans())
def test_part_files_keep_every_good_record(tmp_path_factory, bad_lines, positions, torn):
    path = tmp_path_factory.mktemp("part") / "trajectories.part.jsonl"
    good = [json.dumps({"split": "test", "index": i, "rounds": []}).encode() for i in range(8)]
    lines = list(good)
    for bad, pos in zip(bad_lines, positions):
        lines.insert(pos, bad)
    raw = b"".join(line + b"\n" for line in lines) + (b'{"index": 99, "rou' if torn else b"")
    path.write_bytes(raw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = read_part(path)
    indices = [r["index"] for r in recs]
    # every good record survives, in order; a bad line that happens to be a valid record is kept as one
    assert [i for i in indices if i < 8] == list(range(8))
    for w in caught:
        assert issubclass(w.category, PartFileWarning) and str(path) in str(w.message) and "line " in str(w.message)
    OUTCOMES["part file: good records kept"] += 1


def test_battery_counts():
    """Printed for the closing note: how many malformed inputs were tried and how each ended."""
    total = sum(OUTCOMES.values())
    print(f"\nmalformed-input battery: {total} tried; " + "; ".join(f"{k}: {v}" for k, v in sorted(OUTCOMES.items())))
    assert total > 0


# --------------------------------------------------------------------------- hostile arrays files
def _run_setting() -> Setting:
    """A setting as a generation run writes it: its meta restates the arrays in many places."""
    from vrr.core.model import class_accept_rates

    s = _valid_setting()
    meta = {"setting": "run", "split": "test", "M": 8, "K_max": 3, "indices": list(range(20, 32)),
            "validity_by_round": [float(v) for v in s.y.mean(axis=0)],
            "accept_rate_by_round": [float(v) for v in s.S.mean(axis=0) / 8],
            "probe": {"split": "train", "indices": list(range(10)), "votes": 16,
                      **class_accept_rates(s.probe_S, s.probe_y, 16)},
            "config": {"setting": "run", "split": "test", "start": 20, "n": 12, "M": 8, "K_max": 3,
                       "probe_votes": 16}}
    return Setting(S=s.S, y=s.y, M=8, probe_S=s.probe_S, probe_M=16, probe_y=s.probe_y, meta=meta)


def _write_members(path: Path, members: list[tuple[str, np.ndarray]]) -> Path:
    """A zip written member by member (duplicates allowed, as a hostile writer could)."""
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about a duplicate name, and writes it
        with zipfile.ZipFile(path, "w") as zf:
            for name, value in members:
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.asanyarray(value), allow_pickle=False)
                zf.writestr(name, buf.getvalue())
    return path


def _refused(path: Path, field: str, words: str = ""):
    with pytest.raises(DataContractError) as info:
        load_setting(path)
    assert info.value.field == field, str(info.value)
    assert str(path) in str(info.value) and words in info.value.problem, str(info.value)
    assert len(str(info.value)) < 600
    return info.value


def test_a_run_setting_round_trips(tmp_path):
    path = save_setting(tmp_path / "run" / "arrays.npz", _run_setting())
    assert load_setting(path).meta == _run_setting().meta


def test_a_npy_saved_as_npz_names_the_file(tmp_path):
    path = tmp_path / "run" / "arrays.npz"
    path.parent.mkdir()
    with open(path, "wb") as fh:
        np.save(fh, np.zeros((3, 4), dtype=np.int16))
    _refused(path, "<file>", ".npy")


def test_two_members_of_the_same_name_are_refused(tmp_path):
    s = _run_setting()
    arrays = {k: v for k, v in _raw_arrays(s).items()}
    arrays["meta"] = np.asarray(json.dumps(s.meta))
    members = [(f"{k}.npy", v) for k, v in arrays.items()] + [("S.npy", np.zeros_like(s.S))]
    _refused(_write_members(tmp_path / "run" / "arrays.npz", members), "S", "twice")
    # "S" and "S.npy" are the same array for numpy.load
    members = [(f"{k}.npy", v) for k, v in arrays.items()] + [("S", np.zeros_like(s.S))]
    _refused(_write_members(tmp_path / "run2" / "arrays.npz", members), "S", "twice")


def test_a_vote_count_beyond_the_bound_is_refused(tmp_path):
    s = _run_setting()
    arrays = _raw_arrays(s)
    arrays["M"] = np.asarray(2 ** 64 - 1, dtype=np.uint64)
    arrays["meta"] = np.asarray(json.dumps({"setting": "run"}))
    _refused(_write_members(tmp_path / "run" / "arrays.npz", [(f"{k}.npy", v) for k, v in arrays.items()]),
             "M", "<= 1024")


def _set(meta: dict, dotted: str, value):
    *parents, last = dotted.split(".")
    for p in parents:
        meta = meta[p]
    meta[last] = value


@pytest.mark.parametrize("dotted, value, field, words", [
    ("indices", [str(i) for i in range(20, 32)], "meta.indices", "integer"),
    ("indices", [20] * 12, "meta.indices", "more than once"),
    ("indices", list(range(21, 32)), "meta.indices", "12 instances"),
    ("indices", list(range(40, 52)), "meta.indices", "window"),
    ("probe.indices", list(range(9)), "meta.probe.indices", "10 plans"),
    ("probe.indices", ["a"] * 10, "meta.probe.indices", "integer"),
    ("probe.n_valid", 0, "meta.probe.n_valid", "says 0"),
    ("probe.J", 0.5, "meta.probe.J", "says 0.5"),
    ("config.n", 13, "meta.config.n", "says 13"),
    ("config.M", 9, "meta.config.M", "says 9"),
    ("config.K_max", 4, "meta.config.K_max", "says 4"),
    ("config.probe_votes", 8, "meta.config.probe_votes", "says 8"),
    ("config.setting", "other", "meta.config.setting", "other"),
    ("config", [1], "meta.config", "JSON object"),
    ("setting", "other", "meta.setting", "folder"),
    ("setting", 7, "meta.setting", "name"),
    ("validity_by_round", [0.5, 0.5, 0.5], "meta.validity_by_round", "4 rounds"),
    ("validity_by_round", [0.0, 0.0, 0.0, 0.0], "meta.validity_by_round", "round 0"),
    ("accept_rate_by_round", [0.5] * 5, "meta.accept_rate_by_round", "4 rounds"),
    ("N", 7, "meta.N", "says 7, the arrays have 12"),
    ("N", "12", "meta.N", "says '12'"),
    ("K", 2, "meta.K", "says 2, the arrays have 3"),
    ("Np", 9, "meta.Np", "says 9, the arrays have 10"),
])
def test_every_meta_field_that_restates_the_arrays_is_checked(tmp_path, dotted, value, field, words):
    s = _run_setting()
    meta = json.loads(json.dumps(s.meta))
    _set(meta, dotted, value)
    arrays = _raw_arrays(s)
    arrays["meta"] = np.asarray(json.dumps(meta))
    path = _write_members(tmp_path / "run" / "arrays.npz", [(f"{k}.npy", v) for k, v in arrays.items()])
    _refused(path, field, words)


def test_meta_sizes_that_agree_with_the_arrays_load(tmp_path):
    s = _run_setting()
    s.meta.update(N=12, K=3, Np=10)
    assert load_setting(save_setting(tmp_path / "run" / "arrays.npz", s)).meta["N"] == 12
    no_probe = Setting(S=s.S, y=s.y, M=8, meta={"N": 12, "Np": 0})
    assert load_setting(save_setting(tmp_path / "np" / "arrays.npz", no_probe)).probe_S is None


def test_a_run_file_in_another_runs_folder_is_refused(tmp_path):
    """The same bytes are fine in run/ and refused in other/: meta.setting names the folder."""
    good = save_setting(tmp_path / "run" / "arrays.npz", _run_setting())
    moved = tmp_path / "other" / "arrays.npz"
    moved.parent.mkdir()
    moved.write_bytes(good.read_bytes())
    _refused(moved, "meta.setting", "folder 'other'")
