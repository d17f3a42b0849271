"""The run store cannot be corrupted: foreign, malformed and duplicate records, corrupt run files,
windows past the end of the dataset, and two generators on one run (vrr.loop.store, vrr.loop.runner).

Every test runs the real generate -> finalize path with the fake engine backend on small synthetic
runs, and damages the run's real files the way a stray copy, a crash or a second process would."""
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vrr.label import finalize_setting
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate as _generate
from vrr.loop.store import (PartFileWarning, RunLockedError, RunPaths, RunStoreError, in_window, read_part,
                            read_rejected, run_lock, trajectory_window, window_membership)
from vrr.loop.tasks import get_task
from vrr.settings import load_config

REPO = Path(__file__).resolve().parent.parent
TASK = get_task("gsm8k")
N = 4
OVERRIDES = {"window.N": N, "window.start": 0, "K_max": 1, "M": 2, "engine.batch_size": 2, "probe.n": 0}


def small_cfg(setting="t_mine", **over):
    return run_config(load_config("gsm8k_cpu_favorable", overrides={**OVERRIDES, **over}), setting=setting)


def generate(cfg, root, engine=None, **kw):
    return _generate(cfg, engine=engine or FakeEngine(TASK), out_root=root, progress=False, **kw)


def part_lines(paths):
    return paths.traj_part.read_bytes().splitlines()


def write_lines(path, lines):
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def record_of(root, setting, index, **over):
    """The stored record of ``index`` from a complete run of ``setting`` under ``root``, as JSON bytes."""
    paths = generate(small_cfg(setting), root)
    rec = next(json.loads(line) for line in part_lines(paths) if json.loads(line)["index"] == index)
    rec.update(over)
    return json.dumps(rec, sort_keys=True).encode()


def three_of_four(root, setting="t_mine"):
    """A run of ``setting`` stopped after instances 0, 1, 2 of its window of 4."""
    paths = generate(small_cfg(setting), root, limit=3)
    assert sorted(json.loads(line)["index"] for line in part_lines(paths)) == [0, 1, 2]
    return paths


def frozen_indices(paths):
    with gzip.open(paths.traj, "rt") as f:
        return [(json.loads(line)["setting"], json.loads(line)["split"], json.loads(line)["index"]) for line in f]


# ---- 9: a record of another setting is not an instance of this run -----------------------------


def test_a_record_of_another_setting_is_set_aside_and_its_instance_generated(tmp_path):
    stray = record_of(tmp_path / "elsewhere", "t_other", 3)
    paths = three_of_four(tmp_path)
    with open(paths.traj_part, "ab") as f:
        f.write(stray + b"\n")
    engine = FakeEngine(TASK)
    with pytest.warns(PartFileWarning, match=r"line 4: not a record of setting 't_mine'.*field 'setting' is 't_other'"):
        generate(small_cfg(), tmp_path, engine=engine)
    assert engine.calls, "instance 3 of t_mine was never generated: the other setting's record stood in for it"
    assert finalize_setting(paths, small_cfg()) == "complete"
    assert frozen_indices(paths) == [("t_mine", "test", i) for i in range(N)]
    (entry,) = read_rejected(paths.traj_part)
    assert entry["source"] == "trajectories.part.jsonl" and entry["line"] == 4 and entry["raw"] == stray
    assert "field 'setting' is 't_other'" in entry["reason"]


def test_finalize_does_not_count_a_record_of_another_setting(tmp_path):
    stray = record_of(tmp_path / "elsewhere", "t_other", 3)
    paths = three_of_four(tmp_path)
    with open(paths.traj_part, "ab") as f:
        f.write(stray + b"\n")
    with pytest.warns(PartFileWarning, match=rf"{paths.traj_part}: 1 bad line.*line 4: .*'t_other'"):
        assert finalize_setting(paths, small_cfg()) == "partial"
    assert not paths.arrays.exists() and not paths.traj.exists()


# ---- 10: another split or dataset does not block the window; a window past the dataset's end ------


@pytest.mark.parametrize("field, value", [("split", "train"), ("dataset", "math500")])
def test_a_record_of_another_split_or_dataset_does_not_block_the_window(tmp_path, field, value):
    stray = record_of(tmp_path / "elsewhere", "t_mine", 3, **{field: value})
    paths = three_of_four(tmp_path)
    with open(paths.traj_part, "ab") as f:
        f.write(stray + b"\n")
    engine = FakeEngine(TASK)
    with pytest.warns(PartFileWarning, match=rf"field '{field}' is '{value}'"):
        generate(small_cfg(), tmp_path, engine=engine)
    assert engine.calls
    assert finalize_setting(paths, small_cfg()) == "complete"
    assert frozen_indices(paths) == [("t_mine", "test", i) for i in range(N)]


@pytest.mark.parametrize("over, fields", [
    ({"window.start": 1317}, r"split='test' start=1317 n=4 ends at index 1320, past the end of gsm8k test "
                             r"\(1319 problems"),
    ({"probe.n": 4, "probe.start": 7471}, r"probe_split='train' probe_start=7471 probe_n=4 .*\(7473 problems"),
])
def test_a_window_past_the_end_of_the_dataset_is_refused_before_any_engine(tmp_path, over, fields):
    engine = FakeEngine(TASK)
    with pytest.raises(ValueError, match=rf"setting 't_past': .*{fields}"):
        generate(small_cfg("t_past", **over), tmp_path, engine=engine)
    assert engine.calls == []
    paths = RunPaths(tmp_path, "t_past")
    assert not paths.config.exists() and not paths.traj_part.exists()


# ---- 11: duplicates, malformed records, corrupt run files --------------------------------------


def test_conflicting_duplicates_are_an_error_naming_both_lines(tmp_path):
    paths = generate(small_cfg(), tmp_path)
    lines = part_lines(paths)
    other = json.loads(lines[1])
    other["rounds"][0]["plan"] += " (another sample)"
    write_lines(paths.traj_part, lines + [json.dumps(other, sort_keys=True).encode()])
    before = paths.traj_part.read_bytes()
    engine = FakeEngine(TASK)
    where = (rf"{paths.traj_part}:2 and {paths.traj_part}:5 are two different records of index 1 "
             r"\(fields that differ: rounds\)")
    with pytest.raises(RunStoreError, match=where):
        generate(small_cfg(), tmp_path, engine=engine)
    with pytest.raises(RunStoreError, match=where):
        finalize_setting(paths, small_cfg())
    assert engine.calls == [] and paths.traj_part.read_bytes() == before  # nothing chosen, nothing changed


def test_an_identical_duplicate_is_collapsed_and_set_aside(tmp_path):
    paths = generate(small_cfg(), tmp_path)
    lines = part_lines(paths)
    write_lines(paths.traj_part, lines + [lines[2]])
    engine = FakeEngine(TASK)
    with pytest.warns(PartFileWarning, match="line 5: identical copy of line 3"):
        generate(small_cfg(), tmp_path, engine=engine)
    assert engine.calls == [] and part_lines(paths) == lines
    assert [(e["line"], e["raw"]) for e in read_rejected(paths.traj_part)] == [(5, lines[2])]


def _no_rounds(rec):
    del rec["rounds"]


def _judge_not_strings(rec):
    rec["rounds"][0]["judge"] = [1, 0]


def _one_round_too_few(rec):
    rec["rounds"] = rec["rounds"][:1]


def _one_vote_too_few(rec):
    rec["rounds"][1]["judge"] = rec["rounds"][1]["judge"][:1]


@pytest.mark.parametrize("damage, reason", [
    (_no_rounds, "field 'rounds' missing"),
    (_judge_not_strings, r"field 'rounds\[0\].judge\[0\]' is int, not a string"),
    (_one_round_too_few, r"field 'rounds' has 1 rounds, the run's K_max \+ 1 is 2"),
    (_one_vote_too_few, r"field 'rounds\[1\].judge' has 1 verifier outputs, the run's M is 2"),
])
def test_a_malformed_record_is_set_aside_and_its_instance_generated_again(tmp_path, damage, reason):
    paths = generate(small_cfg(), tmp_path)
    lines = part_lines(paths)
    rec = json.loads(lines[3])
    damage(rec)
    bad = json.dumps(rec, sort_keys=True).encode()
    write_lines(paths.traj_part, lines[:3] + [bad])
    # finalize reports the line with its file and reason and does not count it; it does not crash
    with pytest.warns(PartFileWarning, match=rf"{paths.traj_part}: 1 bad line.*line 4: malformed trajectories "
                                             rf"record \(index 3\): {reason}"):
        assert finalize_setting(paths, small_cfg()) == "partial"
    engine = FakeEngine(TASK)
    with pytest.warns(PartFileWarning, match=reason):
        generate(small_cfg(), tmp_path, engine=engine)
    assert engine.calls
    assert finalize_setting(paths, small_cfg()) == "complete"
    assert frozen_indices(paths) == [("t_mine", "test", i) for i in range(N)]
    (entry,) = read_rejected(paths.traj_part)
    assert entry["line"] == 4 and entry["raw"] == bad


@pytest.mark.parametrize("content, problem", [
    (b'{"K_max": 1, "M": ', "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[]", "not a JSON object"),
    (None, r"field 'n' is 'four', expected int"),
])
def test_a_corrupt_config_json_is_an_error_naming_it(tmp_path, content, problem):
    paths = generate(small_cfg(), tmp_path, limit=2)
    if content is None:
        content = json.dumps({**json.loads(paths.config.read_text()), "n": "four"}).encode()
    paths.config.write_bytes(content)
    before = paths.traj_part.read_bytes()
    engine = FakeEngine(TASK)
    with pytest.raises(RunStoreError, match=rf"{paths.config}: {problem}") as caught:
        generate(small_cfg(), tmp_path, engine=engine)
    assert caught.value.path == paths.config
    with pytest.raises(RunStoreError, match=rf"{paths.config}: {problem}"):
        finalize_setting(paths)
    assert engine.calls == [] and paths.traj_part.read_bytes() == before


@pytest.mark.parametrize("content, problem", [
    (None, "not valid JSON"),                                       # cut in the middle
    (b'{"sessions": {"id": 1}}', "field 'sessions' is not a list"),
])
def test_a_corrupt_run_meta_json_stops_the_run_before_any_batch(tmp_path, content, problem):
    paths = generate(small_cfg(), tmp_path, limit=2)
    paths.meta.write_bytes(content if content is not None else paths.meta.read_bytes()[:40])
    before = paths.traj_part.read_bytes()
    engine = FakeEngine(TASK)
    with pytest.raises(RunStoreError, match=rf"{paths.meta}: {problem}") as caught:
        generate(small_cfg(), tmp_path, engine=engine)
    assert caught.value.path == paths.meta
    assert engine.calls == [] and paths.traj_part.read_bytes() == before  # no batch appended before the error
    with pytest.raises(RunStoreError, match=rf"{paths.meta}: {problem}"):
        finalize_setting(paths, small_cfg())


def test_a_line_that_is_not_utf8_is_kept_byte_for_byte_in_the_rejected_file(tmp_path):
    paths = generate(small_cfg(), tmp_path, limit=2)
    lines = part_lines(paths)
    write_lines(paths.traj_part, [lines[0], b"\xff\xfe\x00 binary", lines[1]])
    with pytest.warns(PartFileWarning, match="line 2: not UTF-8"):
        assert [r["index"] for r in read_part(paths.traj_part)] == [0, 1]
    (entry,) = read_rejected(paths.traj_part)
    assert entry["raw"] == b"\xff\xfe\x00 binary" and entry["source"] == "trajectories.part.jsonl"
    assert part_lines(paths) == lines


def test_the_window_predicate_checks_every_field():
    window = trajectory_window(small_cfg())
    rec = {"setting": "t_mine", "dataset": "gsm8k", "split": "test", "index": 2}
    assert in_window(rec, window)
    assert window_membership({**rec, "index": N}, window)[0] == "past the window"  # kept for a longer window
    for field, value in (("setting", "t_other"), ("dataset", "math500"), ("split", "train"), ("index", -1)):
        place, why = window_membership({**rec, field: value}, window)
        assert place == "foreign" and f"field '{field}'" in why
    assert "field 'setting' missing" in window_membership({k: v for k, v in rec.items() if k != "setting"}, window)[1]


# ---- 12: one generator per run -----------------------------------------------------------------

GENERATOR = """
import json, sys
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate
from vrr.loop.tasks import get_task
from vrr.settings import load_config
cfg = run_config(load_config("gsm8k_cpu_favorable", overrides=json.loads(sys.argv[2])), setting="t_mine")
generate(cfg, engine=FakeEngine(get_task("gsm8k"), call_seconds=0.5), out_root=sys.argv[1], progress=False)
"""

HOLDER = """
import sys
from pathlib import Path
from vrr.loop.store import run_lock
with run_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def _wait_for_holder(lock: Path, pid: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if lock.exists() and f'"pid": {pid}' in lock.read_text():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the first generator exited ({proc.returncode}) before it was seen holding the lock: "
                                 + proc.stderr.read())
        time.sleep(0.05)
    raise AssertionError(f"{lock}: the first generator never recorded itself")


def test_a_second_generator_on_one_run_stops_at_once_naming_the_holder(tmp_path):
    paths = RunPaths(tmp_path, "t_mine")
    first = subprocess.Popen([sys.executable, "-c", GENERATOR, str(tmp_path), json.dumps(OVERRIDES)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_holder(paths.generate_lock, first.pid, first)
        engine = FakeEngine(TASK)
        t0 = time.time()
        with pytest.raises(RunLockedError, match=rf"{paths.generate_lock}: the run is locked by pid {first.pid} "
                                                 rf"on host {socket.gethostname()} since \d{{4}}-"):
            generate(small_cfg(), tmp_path, engine=engine)
        assert time.time() - t0 < 5 and engine.calls == []
        assert first.wait(timeout=120) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    indices = [json.loads(line)["index"] for line in part_lines(paths)]
    assert sorted(indices) == list(range(N))  # the window ran once, not twice
    engine = FakeEngine(TASK)
    generate(small_cfg(), tmp_path, engine=engine)  # the lock was released: the next session runs (nothing to do)
    assert engine.calls == []


def test_the_lock_is_released_when_its_holder_is_killed(tmp_path):
    lock = tmp_path / "run" / "generate.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n", holder.stderr.read()
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} on host"):
            with run_lock(lock):
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    with run_lock(lock) as me:  # the kernel released the dead holder's lock
        assert me["pid"] == os.getpid() and json.loads(lock.read_text())["pid"] == os.getpid()
    assert lock.read_text() == ""  # released: no holder recorded


# ---- user errors through the CLI: one line naming the field, status 2, no traceback, no engine ----------


def cli(*args, timeout=300):
    """``python -m vrr generate gsm8k_cpu_favorable`` on a small window with the fake backend."""
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", str(N),
           "--probe-n", "0", "--set", "K_max=1", "--set", "M=2", "--no-progress", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(out, *words):
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out.stderr, out.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_a_probe_from_naming_nothing_is_refused_through_the_cli(tmp_path):
    out = cli("--run-name", "t_pf", "--out-root", str(tmp_path), "--set", "probe.from=no_such_setting")
    line = assert_one_line_error(out, "field 'probe.from'", "'no_such_setting'", "no_such_setting.yaml",
                                 str(tmp_path / "no_such_setting" / "config.json"))
    assert line.startswith(f"error: {tmp_path / 't_pf'}: ")
    assert not (tmp_path / "t_pf" / "config.json").exists()
    assert not list((tmp_path / "t_pf").glob("*.part.jsonl"))


def test_a_window_past_the_dataset_is_refused_through_the_cli(tmp_path):
    out = cli("--run-name", "t_ws", "--out-root", str(tmp_path), "--set", "window.start=1000000")
    assert_one_line_error(out, "setting 't_ws'", "field 'window.start'", "start=1000000", "1319 problems")
    out = cli("--run-name", "t_ws", "--out-root", str(tmp_path), "--set", "window.start=1317")
    assert_one_line_error(out, "field 'window.N'", "start=1317 n=4 ends at index 1320")
    assert not (tmp_path / "t_ws" / "config.json").exists()


def test_an_out_root_that_is_a_file_is_refused_through_the_cli(tmp_path):
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    out = cli("--run-name", "t_or", "--out-root", str(a_file))
    assert_one_line_error(out, f"{a_file} is a file, not a folder", "--out-root")
    out = cli("--run-name", "t_or", "--out-root", str(a_file), "--finalize-only")
    assert_one_line_error(out, f"{a_file} is a file, not a folder", "--out-root")
    assert a_file.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize("where", ["file", "under_file", "unwritable"])
def test_an_unusable_out_root_names_what_is_in_the_way(tmp_path, where):
    a_file = tmp_path / "f"
    a_file.write_text("")
    root, words = {"file": (a_file, f"{a_file} is a file"), "under_file": (a_file / "x" / "y", f"{a_file} is a file"),
                   "unwritable": (Path("/proc/sys"), "/proc/sys is not writable")}[where]
    engine = FakeEngine(TASK)
    with pytest.raises(RunStoreError, match="cannot create the run's lock: " + words) as caught:
        generate(small_cfg("t_or"), root, engine=engine)
    assert caught.value.path == root / "t_or" / "generate.lock" and engine.calls == []
    with pytest.raises(RunStoreError, match=str(root / "t_or" / "config.json")):
        finalize_setting(RunPaths(root, "t_or"), small_cfg("t_or"))


def test_a_window_past_the_dataset_names_the_settings_field(tmp_path):
    from vrr.loop.store import WindowError

    for over, field in (({"window.start": 5000}, "window.start"), ({"window.start": 1316}, "window.N"),
                        ({"probe.n": 2, "probe.start": 9000}, "probe.start"),
                        ({"probe.n": 4, "probe.start": 7471}, "probe.n")):
        engine = FakeEngine(TASK)
        with pytest.raises(WindowError, match=rf"setting 't_past': field '{field}': "):
            generate(small_cfg("t_past", **over), tmp_path, engine=engine)
        assert engine.calls == []


@pytest.mark.parametrize("owner, over, words", [
    ("t_self", {}, "is this run itself"),
    ("sim_qwen3b_favorable", {}, "is a simulated setting"),
    ("gsm8k_cpu_pmstress", {}, "borrows its own probe from 'gsm8k_cpu_favorable'"),
    ("mbpp_cpu_favorable", {}, "is a run of task 'mbpp'"),
    ("t_owner", {"probe.n": 0}, "has no probe of its own"),
    ("t_owner", {"probe.from": "gsm8k_cpu_favorable"}, "borrows its own probe"),
])
def test_a_probe_from_that_owns_no_probe_is_refused_before_any_engine(tmp_path, owner, over, words):
    if owner == "t_owner":  # an owner run that exists: its config.json decides
        generate(small_cfg("t_owner", **over), tmp_path, limit=1)
    engine = FakeEngine(TASK)
    cfg = small_cfg("t_self", **{"probe.from": owner, "probe.n": 2})
    with pytest.raises(RunStoreError, match=rf"field 'probe.from': '{owner}' {words}") as caught:
        generate(cfg, tmp_path, engine=engine)
    assert caught.value.path == tmp_path / "t_self" and engine.calls == []
    assert not (tmp_path / "t_self" / "config.json").exists()


def test_a_probe_from_naming_a_setting_or_an_owner_run_is_accepted(tmp_path):
    generate(small_cfg("t_borrower", **{"probe.from": "gsm8k_cpu_favorable"}), tmp_path)  # its run not started
    generate(small_cfg("t_owner", **{"probe.n": 2, "probe.start": 0}), tmp_path)
    paths = generate(small_cfg("t_pm", **{"probe.from": "t_owner"}), tmp_path)
    assert finalize_setting(paths, small_cfg("t_pm", **{"probe.from": "t_owner"})) == "complete"


def test_a_changed_protocol_is_a_run_store_error_naming_config_json(tmp_path):
    paths = generate(small_cfg(), tmp_path, limit=2)
    with pytest.raises(RunStoreError, match=r"'M': stored 2, requested 3") as caught:
        generate(small_cfg(M=3), tmp_path)
    assert caught.value.path == paths.config


def test_a_negative_limit_is_refused_through_the_cli(tmp_path):
    out = cli("--run-name", "t_lim", "--out-root", str(tmp_path), "--limit", "-1")
    assert out.returncode == 2 and "argument --limit: must be >= 0, got -1" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "t_lim").exists()
