"""Where a generation run is: the summary ``python -m vrr generate`` prints (run folder, counts per shard,
missing indices, the next command, which runs as printed), a model swap's folder said when the run starts,
a sharded run's merged ``run_meta.json``, the store's readers taking a folder's path, and a refused run
leaving no folder behind (vrr.loop.summary, vrr.loop.store)."""
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from test_openai_backend import stub_factory  # noqa: F401  (a fixture: the stub server on 127.0.0.1)
from test_shards import HOLD
from vrr.chain import main
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine
from vrr.loop.runner import generate
from vrr.loop.store import (RunPaths, RunStoreError, Shard, read_run_meta, read_stored_config, read_window,
                            stored_window)
from vrr.loop.summary import CHOSEN_BY_THE_SUMMARY, RESUME_OPTIONS
from vrr.loop.tasks import get_task
from vrr.settings import load_config

REPO = Path(__file__).resolve().parent.parent
TASK = get_task("gsm8k")
BASE = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "fake", "--n", "4",
        "--probe-n", "2", "--set", "K_max=1", "--set", "M=2", "--no-progress"]


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, **kw)


def summary_lines(proc) -> dict:
    """The summary's lines by their label (the text before the first ': '), in order."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for line in proc.stdout.strip().splitlines():
        label, _, rest = line.partition(": ")
        out[label] = rest
    return out


def next_command(lines: dict, label: str = "next") -> list[str]:
    words = shlex.split(lines[label], comments=True)
    assert words[1:4] == ["-m", "vrr", "generate"], lines[label]
    return [sys.executable] + words[1:]


def test_a_partial_run_says_where_it_is_and_its_next_command_completes_it(tmp_path):
    proc = run(BASE + ["--run-name", "r", "--out-root", str(tmp_path), "--limit", "3"])  # the 2 probe plans, 1 instance
    lines = summary_lines(proc)
    assert list(lines)[0] == "partial" and lines["partial"] == "1 of 4 trajectories and 2 of 2 probe plans stored"
    assert lines["run folder"] == str(tmp_path / "r") and Path(lines["run folder"]).is_absolute()
    start = json.loads((tmp_path / "r" / "config.json").read_text())["start"]
    assert lines["missing"] == f"trajectories {start + 1}..{start + 3}"
    assert lines["arrays"] == str(tmp_path / "r" / "arrays.partial.npz")
    assert "--limit" not in lines["next"] and "--run-name r" in lines["next"]
    done = summary_lines(run(next_command(lines)))
    assert list(done)[0] == "complete" and done["complete"] == "4 of 4 trajectories and 2 of 2 probe plans stored"
    assert done["next"] == "nothing to generate: the window is complete" and "missing" not in done
    assert done["arrays"] == str(tmp_path / "r" / "arrays.npz")


def test_a_model_swap_says_its_folder_and_the_printed_finalize_names_it(tmp_path):
    folder = tmp_path / "gsm8k_cpu_favorable--gen-model-7b--judge-judge-x"
    note = f"model swap: writing to {folder}; pass the same --model/--verifier to resume or finalize"
    proc = run(BASE + ["--model", "org/Model-7B", "--verifier", "judge-x", "--out-root", str(tmp_path),
                       "--no-finalize"])
    assert proc.stderr.startswith(note + "\n"), proc.stderr[-2000:]  # said once, when the run starts
    assert proc.stderr.count("model swap:") == 1 and "model swap:" not in proc.stdout
    lines = summary_lines(proc)
    assert list(lines)[0] == "not finalized" and lines["run folder"] == str(folder)
    finalize = next_command(lines)
    assert finalize[-1] == "--finalize-only" and "--model" in finalize and "--verifier" in finalize
    # the setting's own folder holds no run: finalizing it names the swapped one
    plain = run(BASE[:5] + ["--out-root", str(tmp_path), "--finalize-only"])
    assert plain.returncode == 2 and plain.stderr.count("\n") == 1, plain.stderr
    assert f"error: {tmp_path / 'gsm8k_cpu_favorable'}: no run here" in plain.stderr and folder.name in plain.stderr
    done = run(finalize)
    assert list(summary_lines(done))[0] == "complete" and (folder / "arrays.npz").is_file()
    assert "model swap:" not in done.stdout + done.stderr             # --finalize-only writes nothing new


def test_a_sharded_run_counts_each_shard_and_keeps_one_merged_run_meta(tmp_path):
    first = summary_lines(run(BASE + ["--run-name", "s", "--out-root", str(tmp_path), "--shard", "0/2"]))
    assert list(first)[0] == "partial"
    assert first["shard 0/2"] == "2 of 2 trajectories, 1 of 1 probe plans"
    assert first["shard 1/2"] == "0 of 2 trajectories, 0 of 1 probe plans (never ran)"
    start = json.loads((tmp_path / "s" / "config.json").read_text())["start"]
    odd = sorted(i for i in range(start, start + 4) if i % 2 == 1)
    assert first["missing"].startswith(f"trajectories {odd[0]}, {odd[1]} (shard 1/2); probe plans ")
    assert "next (shard 0/2)" not in first
    second = next_command(first, "next (shard 1/2)")
    assert second[second.index("--shard") + 1] == "1/2"
    assert next_command(first, "then")[-1] == "--finalize-only"
    done = summary_lines(run(second))
    assert list(done)[0] == "complete" and done["shard 1/2"] == "2 of 2 trajectories, 1 of 1 probe plans"
    # finalizing wrote the merged run meta into the run's own run_meta.json: one session per shard
    meta = json.loads((tmp_path / "s" / "run_meta.json").read_text())
    assert [s["shard"] for s in meta["sessions"]] == ["0/2", "1/2"]
    assert sum(s["instances"] for s in meta["sessions"]) == 4
    for where in (str(tmp_path / "s"), tmp_path / "s", RunPaths(tmp_path, "s")):
        assert read_run_meta(where)["sessions"] == meta["sessions"]  # each session once
    again = run(BASE[:5] + ["--run-name", "s", "--out-root", str(tmp_path), "--finalize-only"])
    assert list(summary_lines(again))[0] == "complete"
    assert read_run_meta(tmp_path / "s")["sessions"] == meta["sessions"]


def test_the_readers_take_a_folder_path_and_name_what_is_not_a_run(tmp_path):
    cfg = run_config(load_config("gsm8k_cpu_favorable", overrides={"window.N": 3, "probe.n": 0, "K_max": 1, "M": 2}),
                     setting="p")
    paths = generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, progress=False)
    for where in (str(paths.dir), paths.dir):
        assert read_run_meta(where)["sessions"] == read_run_meta(paths)["sessions"]
        assert read_stored_config(where) == read_stored_config(paths)
        assert [r["index"] for r in read_window(where).traj] == [r["index"] for r in read_window(paths).traj]
        assert len(stored_window(where, cfg).traj) == 3
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "empty").mkdir()
    for where, words in ((tmp_path / "nowhere", "no such folder"), (tmp_path / "a_file", "is a file, not a run folder"),
                         (tmp_path / "empty", "is not a run folder: it holds no config.json")):
        for reader in (read_run_meta, read_stored_config, read_window):
            with pytest.raises(RunStoreError, match=words) as caught:
                reader(str(where))
            assert str(caught.value).startswith(f"{where}: ")


class FailingEngine(FakeEngine):
    """The fake engine whose ``after``-th chat call fails, as a server that goes away does; ``on_fail`` runs first."""

    def __init__(self, after=0, on_fail=None):
        super().__init__(TASK)
        self.after, self.on_fail, self.n_calls = after, on_fail, 0

    def chat(self, *args, **kw):
        if self.n_calls == self.after:
            if self.on_fail:
                self.on_fail()
            raise RuntimeError("the engine stopped")
        self.n_calls += 1
        return super().chat(*args, **kw)


def small(setting, **over):
    return run_config(load_config("gsm8k_cpu_favorable", overrides={"window.N": 4, "probe.n": 0, "K_max": 1, "M": 2,
                                                                    "engine.batch_size": 2, **over}), setting=setting)


def test_an_error_before_the_first_record_leaves_no_folder_and_after_it_keeps_the_run(tmp_path):
    root = tmp_path / "new" / "root"
    with pytest.raises(RuntimeError, match="the engine stopped"):
        generate(small("t"), engine=FailingEngine(), out_root=root, progress=False)
    assert not (tmp_path / "new").exists()  # the run folder and the out root's folders it created
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError):
        generate(small("t"), engine=FailingEngine(), out_root=tmp_path / "kept", progress=False)
    assert list((tmp_path / "kept").iterdir()) == []  # a folder that existed stays
    with pytest.raises(RuntimeError):  # the first batch of 2 is stored, then the engine fails
        generate(small("t"), engine=FailingEngine(after=4), out_root=root, progress=False)
    assert len((root / "t" / "trajectories.part.jsonl").read_text().splitlines()) == 2
    with pytest.raises(RuntimeError):  # a run that exists keeps its folder whatever fails
        generate(small("t"), engine=FailingEngine(), out_root=root, progress=False)
    assert (root / "t" / "config.json").is_file()


def test_a_failed_shard_keeps_the_folder_another_shard_is_writing(tmp_path):
    with pytest.raises(RuntimeError):
        generate(small("t_shard"), engine=FailingEngine(), out_root=tmp_path / "alone", progress=False,
                 shard=Shard(0, 2))
    assert not (tmp_path / "alone").exists()
    holders = []

    def start_shard_1():  # shard 1/2 starts while shard 0/2 runs in the folder 0/2 created
        holders.append(subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "both"), "1/2"],
                                        stdout=subprocess.PIPE, text=True, cwd=REPO))
        assert holders[0].stdout.readline().strip() == "held"

    try:
        with pytest.raises(RuntimeError):
            generate(small("t_shard"), engine=FailingEngine(on_fail=start_shard_1), out_root=tmp_path / "both",
                     progress=False, shard=Shard(0, 2))
        assert (tmp_path / "both" / "t_shard" / "config.json").is_file()
    finally:
        for h in holders:
            h.kill()
            h.wait()


def test_a_refused_model_leaves_no_run_folder(tmp_path, stub_factory):
    """The server lists its models; a --model it does not serve is refused before any work, with status 2,
    and the out root the command would have created is not there."""
    stub = stub_factory(task=TASK)
    out = tmp_path / "out"
    proc = run(BASE[:5] + ["--backend", "openai", "--set", f"engine.base_url={stub.url}", "--model", "does-not-exist",
                           "--verifier", "does-not-exist", "--n", "2", "--probe-n", "0", "--out-root", str(out),
                           "--no-progress"])
    assert proc.returncode == 2 and "does-not-exist" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    assert proc.stderr.splitlines()[0].startswith("model swap: writing to ")
    past = run(BASE + ["--set", "window.start=1000000", "--out-root", str(out)])
    assert past.returncode == 2 and "field 'window.start'" in past.stderr and not out.exists()


def test_every_generate_option_is_repeated_or_chosen_by_the_summary(capsys):
    """A new option of ``python -m vrr generate`` must be placed: repeated by the printed resume command or
    set by the summary itself."""
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    import re
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out)) - {"--help"}
    placed = {flag for _, flag in RESUME_OPTIONS} | {"--" + attr.replace("_", "-") for attr in CHOSEN_BY_THE_SUMMARY}
    assert shown == placed


def test_more_missing_shards_than_lines_share_one_command(tmp_path):
    from vrr.loop.summary import MAX_SHARD_LINES, GenerateCommand, run_summary

    cfg = small("t_many", **{"window.N": 12})
    generate(cfg, engine=FakeEngine(TASK), out_root=tmp_path, progress=False, shard=Shard(0, 6))
    command = GenerateCommand("gsm8k_cpu_favorable", (("--run-name", "t_many"), ("--out-root", str(tmp_path))))
    text = run_summary(None, RunPaths(tmp_path, "t_many"), cfg, command, shard=Shard(0, 6))
    lines = text.splitlines()
    assert lines[0] == "not finalized: 2 of 12 trajectories stored" and 5 > MAX_SHARD_LINES
    assert [line.split(":")[0] for line in lines[2:8]] == [f"shard {i}/6" for i in range(6)]
    many, = [line for line in lines if line.startswith("next")]
    assert many.startswith("next, for each shard I in 1, 2, 3, 4, 5 (one per node): ") and many.endswith(
        f"generate gsm8k_cpu_favorable --run-name t_many --out-root {tmp_path} --shard I/6")


NO_VLLM = """
import runpy, sys
import vrr.loop.engine.backend as backend
backend.vllm_available = lambda: False   # this interpreter has no vllm module, whatever is installed
runpy.run_module("vrr", run_name="__main__", alter_sys=True)
"""


def test_an_in_process_engine_without_vllm_is_one_line_and_leaves_no_folder(tmp_path):
    """Without a vllm module the in-process engine is refused before its model is resolved (a registry model
    would be downloaded first): one line naming the interpreter and what to run instead, status 2."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO), VRR_GENERATE_WORKER="1")  # the worker itself: the patch holds
    proc = run([sys.executable, "-c", NO_VLLM, "generate", "gsm8k_cpu_favorable", "--backend", "vllm-cpu", "--model",
                "smollm2-135m", "--n", "2", "--probe-n", "0", "--out-root", str(out), "--no-progress"], env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    error = proc.stderr.splitlines()[-1]
    assert error.startswith("error: engine.backend 'vllm-cpu' runs vLLM in this process") and sys.executable in error
    assert "Traceback" not in proc.stderr and "--backend openai" in error
    assert not out.exists()


def test_relabel_writes_a_sharded_run_s_merged_run_meta(tmp_path):
    """`python -m vrr label <run>` rebuilds the arrays and, like finalizing, keeps one run_meta.json with every
    shard's sessions."""
    for shard in ("0/2", "1/2"):
        run(BASE + ["--run-name", "s", "--out-root", str(tmp_path), "--shard", shard, "--no-finalize"])
    merged = tmp_path / "s" / "run_meta.json"
    merged.unlink(missing_ok=True)
    proc = run([sys.executable, "-m", "vrr", "label", str(tmp_path / "s")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "complete"
    assert [s["shard"] for s in json.loads(merged.read_text())["sessions"]] == ["0/2", "1/2"]
