"""Bad input never costs good records, never crashes a batch, and never looks complete.

Each test feeds one kind of fault (a corrupt line, a crashing record, an interrupted write) and asserts
what the code does with it."""
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop.config import from_stored, run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.sandbox import redact_record
from vrr.loop.runner import generate
from vrr.loop.store import PartFileWarning, RunPaths, read_part, read_rejected
from vrr.loop.tasks import get_task, gsm8k
from vrr.settings import load_config

REPO = Path(__file__).resolve().parent.parent
TASK = get_task("gsm8k")


def _records(n):
    return [{"dataset": "gsm8k", "split": "test", "index": i, "rounds": []} for i in range(n)]


def _write_part(path, lines: list[bytes]):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))


@pytest.mark.parametrize("bad, reason", [
    (b"GARBAGE", "not JSON"),
    (b"\xff\xfe not utf-8 \xc3", "not UTF-8"),
    (b"[1, 2, 3]", "not a JSON object"),
    (b'{"split": "test"}', "no integer 'index'"),
])
def test_a_bad_line_in_the_middle_costs_no_record(tmp_path, bad, reason):
    part = tmp_path / "trajectories.part.jsonl"
    good = [json.dumps(r).encode() for r in _records(10)]
    _write_part(part, good[:2] + [bad] + good[2:])
    with pytest.warns(PartFileWarning, match=rf"{part}: 1 bad line\(s\).*10 records kept.*line 3: {reason}"):
        recs = read_part(part)
    assert [r["index"] for r in recs] == list(range(10))
    assert [(e["line"], e["raw"]) for e in read_rejected(part)] == [(3, bad)]
    # the part file was rewritten with the good records only: the next read is clean
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["index"] for r in read_part(part)] == list(range(10))


def test_a_torn_last_line_is_set_aside_and_appends_start_clean(tmp_path):
    part = tmp_path / "p.part.jsonl"
    part.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in _records(3)) + b'{"index": 3, "rou')
    with pytest.warns(PartFileWarning, match="line 4: torn last line"):
        assert len(read_part(part)) == 3
    assert part.read_bytes().endswith(b"\n")


def test_resume_after_a_garbage_line_keeps_every_finished_instance(tmp_path):
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides={
        "window.N": 10, "K_max": 1, "M": 2, "engine.batch_size": 5, "probe.n": 0}), setting="g")
    paths = generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, progress=False)
    lines = paths.traj_part.read_bytes().splitlines()
    _write_part(paths.traj_part, lines[:2] + [b"GARBAGE"] + lines[2:])
    engine = FakeEngine(TASK)
    with pytest.warns(PartFileWarning):
        generate(cfg, engine=engine, out_root=tmp_path, progress=False)
    assert engine.calls == []                               # nothing was lost, so nothing is redone
    assert sorted(r["index"] for r in read_part(paths.traj_part)) == list(range(10))


def test_a_400_digit_answer_labels_invalid_and_never_raises():
    for text in ("The answer is " + "9" * 400 + "/7", "The answer is " + "9" * 400, "\\boxed{" + "1" * 500 + "}",
                 "", None, "no number at all"):
        assert gsm8k.extract_answer(text) is None
        assert gsm8k.label(text, "18") == 0
    rec = redact_record({"rounds": [{"plan": "The answer is " + "9" * 400 + "/7", "judge": []}]},
                        "some problem text", gsm8k.extract_answer)
    assert rec["rounds"][0]["answer"] is None


def test_an_extractor_that_raises_costs_no_batch():
    def broken(text):
        raise OverflowError("too large")

    rec = redact_record({"rounds": [{"plan": "x", "judge": []}]}, "problem", broken)
    assert rec["rounds"][0]["answer"] is None and "OverflowError" in rec["rounds"][0]["answer_error"]


def _copy_committed(tmp_path, name, with_owner):
    src = REPO / "data" / "real" / name
    work = tmp_path / name
    work.mkdir(parents=True)
    for f in ("config.json", "run_meta.json"):
        shutil.copy(src / f, work / f)
    (work / "trajectories.part.jsonl").write_bytes(gzip.decompress((src / "trajectories.jsonl.gz").read_bytes()))
    if with_owner:
        owner = tmp_path / "gsm8k_cpu_favorable"
        owner.mkdir()
        shutil.copy(REPO / "data/real/gsm8k_cpu_favorable/config.json", owner / "config.json")
        (owner / "probe.part.jsonl").write_bytes(
            gzip.decompress((REPO / "data/real/gsm8k_cpu_favorable/probe.jsonl.gz").read_bytes()))
    return work


def test_a_borrowed_probe_whose_owner_is_missing_is_not_complete(tmp_path):
    work = _copy_committed(tmp_path, "gsm8k_cpu_pmstress", with_owner=False)
    assert finalize_setting(RunPaths(tmp_path, "gsm8k_cpu_pmstress")) == "partial"
    assert not (work / "arrays.npz").exists()
    meta = load_setting(work / "arrays.partial.npz").meta
    assert "no config.json" in meta["partial"]["probe_missing"]


def test_a_stray_record_of_another_split_does_not_complete_or_grow_a_window(tmp_path):
    work = _copy_committed(tmp_path, "gsm8k_cpu_pmstress", with_owner=True)
    part = work / "trajectories.part.jsonl"
    lines = part.read_bytes().splitlines()
    stray = json.loads(lines[5])
    stray["split"] = "train"
    _write_part(part, [json.dumps(stray).encode()] + lines[:5] + lines[6:])   # instance 5 only from train
    assert finalize_setting(RunPaths(tmp_path, "gsm8k_cpu_pmstress")) == "partial"
    _write_part(part, [json.dumps(stray).encode()] + lines)                    # all 100 plus the stray one
    assert finalize_setting(RunPaths(tmp_path, "gsm8k_cpu_pmstress")) == "complete"
    st = load_setting(work / "arrays.npz")
    assert st.S.shape[0] == 100 and st.meta["indices"] == list(range(100))
    cfg = from_stored(json.loads((work / "config.json").read_text()))
    assert cfg.n == 100 and np.array_equal(st.S, load_setting(REPO / "data/real/gsm8k_cpu_pmstress/arrays.npz").S)
