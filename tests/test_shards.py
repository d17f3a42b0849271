"""Sharded windows (vrr.loop.store.Shard, ``python -m vrr generate SETTING --shard i/n``): the shards of a run
merge to exactly what the unsharded run stores (fake backend, byte for byte), and resume, the window
predicate and the run lock work per shard."""
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate as _generate
from vrr.loop.store import (PartFileWarning, RunLockedError, RunPaths, RunStoreError, Shard, generation_lock,
                            read_part, read_run_meta, read_window_records, trajectory_window)
from vrr.loop.tasks import get_task
from vrr.settings import load_config

REPO = Path(__file__).resolve().parent.parent
TASK = get_task("gsm8k")
OVERRIDES = {"window.N": 7, "window.start": 3, "K_max": 2, "M": 3, "engine.batch_size": 2, "probe.n": 5,
             "probe.start": 10}


def cfg_of(setting="t_shard", **over):
    return run_config(load_config("gsm8k_cpu_favorable", overrides={**OVERRIDES, **over}), setting=setting)


def generate(cfg, root, shard=None, engine=None, **kw):
    return _generate(cfg, engine=engine or FakeEngine(TASK), out_root=root, progress=False, shard=shard, **kw)


def npz_bytes(path):
    """Every member of an arrays file as bytes; the meta parsed, without the generation wall time."""
    with np.load(path) as z:
        out = {k: z[k].tobytes() for k in z.files if k != "meta"}
    meta = dict(load_setting(path).meta)
    meta.pop("generation_seconds", None)  # the sessions' wall time: not a property of the records
    meta["machines"] = [{k: v for k, v in m.items() if k != "seconds"} for m in meta["machines"]]  # wall time too
    return out, meta


BATCH_FIELDS = ("batch", "batch_size", "batch_seconds", "batch_tokens", "finished_at")  # how it was batched


def frozen(path):
    """The records of a frozen file without the fields that describe the batch they ran in."""
    return [{k: v for k, v in r.items() if k not in BATCH_FIELDS} for r in map(json.loads, gzip.open(path, "rt"))]


def test_shard_parse_and_share():
    s = Shard.parse("1/3")
    assert (s.index, s.count, str(s), s.tag) == (1, 3, "1/3", "shard-1-of-3")
    assert [i for i in range(10) if s.owns(i)] == [1, 4, 7]
    for bad, why in (("3/3", "0..2"), ("1/0", "1.."), ("a/b", "expected i/n"), ("-1/2", "expected i/n")):
        with pytest.raises(ValueError, match=why):
            Shard.parse(bad)
    window = trajectory_window(cfg_of(), "gsm8k", shard=s)
    assert window.indices == [4, 7] and trajectory_window(cfg_of(), "gsm8k").indices == list(range(3, 10))


def test_two_shards_merge_to_the_unsharded_run_byte_for_byte(tmp_path):
    cfg = cfg_of()
    whole = generate(cfg, tmp_path / "whole")
    assert finalize_setting(whole, cfg) == "complete"
    root = tmp_path / "sharded"
    first = generate(cfg, root, shard=Shard(1, 2))
    # one shard done: the run is partial, and nothing of shard 0 was run
    assert finalize_setting(RunPaths(root, cfg.setting), cfg) == "partial"
    assert sorted(json.loads(line)["index"] for line in first.traj_part.read_text().splitlines()) == [3, 5, 7, 9]
    generate(cfg, root, shard=Shard(0, 2))
    merged = RunPaths(root, cfg.setting)
    assert finalize_setting(merged, cfg) == "complete"
    assert not merged.traj_part.exists()  # every record lives in a shard's part file
    assert npz_bytes(merged.arrays) == npz_bytes(whole.arrays)
    for name in ("trajectories.jsonl.gz", "probe.jsonl.gz"):
        assert frozen(merged.dir / name) == frozen(whole.dir / name)
    meta = read_run_meta(merged)
    assert [s["shard"] for s in meta["sessions"]] == ["0/2", "1/2"]
    assert sum(s["instances"] for s in meta["sessions"]) == 7 and sum(s["probe_plans"] for s in meta["sessions"]) == 5


def test_a_shard_resumes_after_a_kill_with_nothing_lost_or_duplicated(tmp_path):
    cfg = cfg_of()
    with pytest.raises(KeyboardInterrupt):
        generate(cfg, tmp_path, shard=Shard(0, 2), engine=FakeEngine(TASK, fail_after=12))
    paths = RunPaths(tmp_path, cfg.setting, shard=Shard(0, 2))
    # probe: 2 batches x 2 calls; trajectories: 6 calls per batch; the kill came in the second batch
    assert [json.loads(x)["index"] for x in paths.traj_part.read_text().splitlines()] == [4, 6]
    before = paths.traj_part.read_text().splitlines() + paths.probe_part.read_text().splitlines()
    with open(paths.traj_part, "a") as f:  # a torn line of the killed write
        f.write('{"index": 6, "rou')
    with pytest.warns(PartFileWarning, match="torn last line"):
        generate(cfg, tmp_path, shard=Shard(0, 2))
    after_t = [json.loads(x)["index"] for x in paths.traj_part.read_text().splitlines()]
    after_p = [json.loads(x)["index"] for x in paths.probe_part.read_text().splitlines()]
    assert sorted(after_t) == [4, 6, 8] and sorted(after_p) == [10, 12, 14]
    now = paths.traj_part.read_text().splitlines() + paths.probe_part.read_text().splitlines()
    assert all(line in now for line in before)  # what was stored before the kill is kept as it was
    generate(cfg, tmp_path, shard=Shard(1, 2))
    assert finalize_setting(RunPaths(tmp_path, cfg.setting), cfg) == "complete"


def test_a_record_of_another_shard_in_a_shards_file_is_set_aside(tmp_path):
    cfg = cfg_of(**{"probe.n": 0})
    generate(cfg, tmp_path, shard=Shard(1, 2))
    mine = RunPaths(tmp_path, cfg.setting, shard=Shard(0, 2))
    stray = RunPaths(tmp_path, cfg.setting, shard=Shard(1, 2)).traj_part.read_text().splitlines()[0]
    mine.traj_part.write_text(stray + "\n")
    engine = FakeEngine(TASK)
    with pytest.warns(PartFileWarning, match=r"falls to shard 1/2, not to this shard 0/2"):
        generate(cfg, tmp_path, shard=Shard(0, 2), engine=engine)
    assert engine.calls  # shard 0's instances were all generated
    assert read_part(mine.traj_part) and {r["index"] % 2 for r in read_part(mine.traj_part)} == {0}


def test_a_shard_skips_instances_the_whole_run_already_stored(tmp_path):
    cfg = cfg_of(**{"probe.n": 0})
    generate(cfg, tmp_path, limit=3)  # whole-window session: indices 3, 4, 5
    engine = FakeEngine(TASK)
    generate(cfg, tmp_path, shard=Shard(0, 2), engine=engine)
    shard_file = RunPaths(tmp_path, cfg.setting, shard=Shard(0, 2)).traj_part
    assert sorted(json.loads(x)["index"] for x in shard_file.read_text().splitlines()) == [6, 8]
    generate(cfg, tmp_path, shard=Shard(1, 2))
    assert finalize_setting(RunPaths(tmp_path, cfg.setting), cfg) == "complete"


def test_two_different_records_of_one_instance_in_two_files_are_refused(tmp_path):
    cfg = cfg_of(**{"probe.n": 0})
    generate(cfg, tmp_path, shard=Shard(0, 2))
    paths = RunPaths(tmp_path, cfg.setting)
    rec = json.loads(RunPaths(tmp_path, cfg.setting, shard=Shard(0, 2)).traj_part.read_text().splitlines()[0])
    rec["rounds"][0]["plan"] += " (another sample)"
    paths.traj_part.write_text(json.dumps(rec) + "\n")
    with pytest.raises(RunStoreError, match=rf"shard-0-of-2.part.jsonl: index {rec['index']} differs from its record in "
                                           rf"{paths.traj_part}"):
        read_window_records(paths.traj_part, trajectory_window(cfg))


def test_a_window_that_grows_keeps_every_instance_in_its_shard(tmp_path):
    cfg = cfg_of(**{"probe.n": 0})
    generate(cfg, tmp_path, shard=Shard(0, 2))
    longer = cfg_of(**{"probe.n": 0, "window.N": 9})
    engine = FakeEngine(TASK)
    generate(longer, tmp_path, shard=Shard(0, 2), engine=engine)
    shard_file = RunPaths(tmp_path, cfg.setting, shard=Shard(0, 2)).traj_part
    assert sorted(json.loads(x)["index"] for x in shard_file.read_text().splitlines()) == [4, 6, 8, 10]


HOLD = """
import sys, time
from pathlib import Path
from vrr.loop.store import RunPaths, Shard, generation_lock
shard = Shard.parse(sys.argv[2]) if sys.argv[2] != "-" else None
with generation_lock(RunPaths(Path(sys.argv[1]), "t_shard", shard=shard)):
    print("held", flush=True)
    time.sleep(60)
"""


def _hold(tmp_path, shard: str):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), shard], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("held, wanted, message", [
    ("0/2", "0/2", "the run is locked by pid"),
    ("0/2", None, "shards 0/2 of this run are running"),
    ("-", "1/2", "a generator of the whole window"),
    ("0/2", "1/3", "shards 0/2 of another split"),
])
def test_the_run_lock_works_per_shard(tmp_path, held, wanted, message):
    holder = _hold(tmp_path, held)
    try:
        shard = Shard.parse(wanted) if wanted else None
        with pytest.raises(RunLockedError, match=message):
            with generation_lock(RunPaths(tmp_path, "t_shard", shard=shard)):
                pass
        if held != "-":  # the other shard of the same split runs beside it
            with generation_lock(RunPaths(tmp_path, "t_shard", shard=Shard(1, 2))):
                pass
    finally:
        holder.kill()
        holder.wait()
    with generation_lock(RunPaths(tmp_path, "t_shard", shard=shard)):
        pass


def state_of(stdout: str) -> str:
    """The run's state, the first word of the summary ``python -m vrr generate`` prints (``partial: ...``)."""
    return stdout.splitlines()[0].split(":")[0]


def test_the_cli_runs_shards_and_the_last_one_finalizes(tmp_path):
    common = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", "4",
              "--probe-n", "2", "--set", "K_max=1", "--set", "M=2", "--run-name", "cli", "--out-root", str(tmp_path),
              "--no-progress"]
    outs = [subprocess.run(common + ["--shard", s], cwd=REPO, capture_output=True, text=True, timeout=300)
            for s in ("0/2", "1/2")]
    assert [o.returncode for o in outs] == [0, 0], outs[-1].stderr[-2000:]
    assert [state_of(o.stdout) for o in outs] == ["partial", "complete"]
    bad = subprocess.run(common + ["--shard", "2/2"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "shard index must be 0..1" in bad.stderr


def test_a_window_missing_a_shard_names_it_and_its_instances(tmp_path):
    """Shards 0/3 and 1/3 ran, 2/3 did not: what is missing is named by shard, as index ranges."""
    from vrr.label.labeling import stored_window
    from vrr.loop.store import missing_instances

    cfg = cfg_of(**{"window.N": 30, "probe.n": 6, "probe.start": 40})
    root = tmp_path / "run"
    generate(cfg, root, shard=Shard(0, 3))
    generate(cfg, root, shard=Shard(1, 3), limit=3)  # its probe (2 plans) and the first of its instances
    paths = RunPaths(root, cfg.setting)
    assert finalize_setting(paths, cfg) == "partial"
    stored = stored_window(paths, cfg, root)
    traj = missing_instances(paths.traj_part, stored.traj_want, [r["index"] for r in stored.traj])
    assert traj == ("19 of 30 trajectories missing: shard 1/3 (ran, incomplete): 9, indices 7..31 step 3; "
                    "shard 2/3 (never ran: no part file): 10, indices 5..32 step 3")
    probe = missing_instances(paths.probe_part, stored.probe_want, [r["index"] for r in stored.probe])
    assert probe == "2 of 6 probe plans missing: shard 2/3 (never ran: no part file): 2, indices 41, 44"
    generate(cfg, root, shard=Shard(1, 3))
    generate(cfg, root, shard=Shard(2, 3))
    stored = stored_window(paths, cfg, root)
    assert missing_instances(paths.traj_part, stored.traj_want, [r["index"] for r in stored.traj]) == ""
    assert finalize_setting(paths, cfg) == "complete"


def test_missing_instances_of_an_unsharded_run_are_ranges(tmp_path):
    from vrr.loop.store import index_ranges, missing_instances

    cfg = cfg_of()
    paths = generate(cfg, tmp_path, limit=5 + 2)  # the probe's 5 plans, then instances 3 and 4
    done = [json.loads(line)["index"] for line in paths.traj_part.read_text().splitlines()]
    assert done == [3, 4]
    assert missing_instances(paths.traj_part, range(3, 10), done) == \
        "5 of 7 trajectories missing: indices 5..9"
    assert index_ranges([1, 2, 3, 5, 7, 9, 10]) == "1..3, 5, 7, 9, 10"
    assert index_ranges([2, 5, 8, 11, 20], step=3) == "2..11 step 3, 20"


def test_finalize_only_names_a_missing_shard_and_fails_unless_partial_is_allowed(tmp_path):
    """Shards 0/3 and 1/3 ran, 2/3 did not: --finalize-only exits 2 naming shard 2/3 and its instances;
    with --allow-partial it exits 0 and writes arrays.partial.npz."""
    common = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", "6",
              "--probe-n", "3", "--set", "K_max=1", "--set", "M=2", "--run-name", "cli", "--out-root", str(tmp_path),
              "--no-progress"]
    for s in ("0/3", "1/3"):
        out = subprocess.run(common + ["--shard", s], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and state_of(out.stdout) == "partial", out.stderr[-2000:]
    final = subprocess.run(common + ["--finalize-only"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert final.returncode == 2 and state_of(final.stdout) == "partial", final.stderr[-2000:]
    line, = final.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'cli'}: the window is partial: ") and "Traceback" not in line
    assert ("2 of 6 trajectories missing: shard 2/3 (never ran: no part file): 2, indices 2, 5; "
            "1 of 3 probe plans missing: shard 2/3 (never ran: no part file): 1, indices 2") in line
    assert "--allow-partial" in line
    ok = subprocess.run(common + ["--finalize-only", "--allow-partial"], cwd=REPO, capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0 and state_of(ok.stdout) == "partial" and "shard 2/3" in ok.stderr
    assert (tmp_path / "cli" / "arrays.partial.npz").exists() and not (tmp_path / "cli" / "arrays.npz").exists()
    done = subprocess.run(common + ["--shard", "2/3"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and state_of(done.stdout) == "complete"
    final = subprocess.run(common + ["--finalize-only"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0 and state_of(final.stdout) == "complete" and final.stderr == ""
