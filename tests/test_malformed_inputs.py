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
