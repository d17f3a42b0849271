"""scripts/run_generation.py: round-robin turns, and --turns ending a run between chunks.

The engine subprocess is replaced by a stand-in interpreter that records its arguments (the edge of
the real dependency); the turn planning and the part-file counting are the script's own."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTING = "gsm8k_cpu_program_pmstress"  # its probe comes from another setting: traj turns only


def _stand_in_python(tmp_path: Path) -> Path:
    calls = tmp_path / "calls.jsonl"
    exe = tmp_path / "python"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\n"
                   f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    exe.chmod(0o755)
    return exe


def _run(tmp_path, *args):
    out_root = tmp_path / "real"
    run_dir = out_root / SETTING
    run_dir.mkdir(parents=True, exist_ok=True)
    # a started run (a committed run's config) with no instance stored: every turn has work to do
    (run_dir / "config.json").write_text((REPO / "data" / "real" / SETTING / "config.json").read_text())
    exe = _stand_in_python(tmp_path)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run_generation.py"), "--python", str(exe),
                           "--log-dir", str(tmp_path / "logs"), "--out-root", str(out_root), *args,
                           SETTING, "--", "--batch-size", "12"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()] \
        if (tmp_path / "calls.jsonl").exists() else []
    return proc, calls


def test_turns_stop_the_run_between_chunks(tmp_path):
    proc, calls = _run(tmp_path, "--chunk", "12", "--turns", "3")
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 3  # no fourth chunk, and no finalize of an incomplete run
    for argv in calls:
        assert argv[:3] == ["-m", "vrr", "generate"] and SETTING in argv
        assert argv[argv.index("--limit") + 1] == "12" and argv[argv.index("--phase") + 1] == "traj"
        assert "--no-finalize" in argv and argv[argv.index("--batch-size") + 1] == "12"
    assert "rerun the same command to resume" in proc.stdout


def test_turns_without_chunks_is_an_error(tmp_path):
    proc, calls = _run(tmp_path, "--turns", "2")
    assert proc.returncode == 2 and "--turns" in proc.stderr and calls == []


def test_a_negative_chunk_is_an_error(tmp_path):
    proc, calls = _run(tmp_path, "--chunk", "-5")
    assert proc.returncode == 2 and "--chunk: a number of instances >= 0" in proc.stderr and calls == []


def test_an_out_root_that_is_a_file_is_an_error(tmp_path):
    a_file = tmp_path / "passwd"
    a_file.write_text("x\n")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run_generation.py"), "--python", sys.executable,
                           "--log-dir", str(tmp_path / "logs"), "--out-root", str(a_file), SETTING],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"--out-root {a_file}: {a_file} is a file, not a folder" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "logs").exists()


def test_a_corrupt_config_json_is_an_error_naming_it(tmp_path):
    run_dir = tmp_path / "real" / SETTING
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text('{"n": ')
    exe = _stand_in_python(tmp_path)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "run_generation.py"), "--python", str(exe),
                           "--log-dir", str(tmp_path / "logs"), "--out-root", str(tmp_path / "real"),
                           "--chunk", "4", SETTING], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{run_dir / 'config.json'}: not valid JSON" in proc.stderr
