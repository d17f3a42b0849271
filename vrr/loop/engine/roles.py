"""The engines of a run's three roles (generator, judge, repairer) and what each role used.

:func:`make_role_engines` builds one engine per distinct (model, server) of the roles, so roles that
share a model share one vLLM engine or one server connection pool, and hands each role a
:class:`RoleEngine` that counts that role's requests and tokens. :func:`usage_record` turns the
counts into ``run_meta.json``'s per-role usage, priced in dollars where the setting gives a price
per million tokens.

The setting's ``engine`` block (``vrr.settings``) is the ``options`` mapping: ``backend: openai``
reads ``base_url``, ``api_key_env``, ``concurrency``, ``timeout``, ``max_retries``, ``n``,
``prefill`` and the prices, each overridable per role under ``engine.roles.<role>``; the in-process
backends read the vLLM engine arguments (``tensor_parallel_size``, ``gpu_memory_utilization``, ...).
"""
from __future__ import annotations

from typing import Mapping, Sequence

ROLES = ("generator", "judge", "repairer")
# engine-block fields a role may override (engine.roles.<role>.<field>)
ROLE_FIELDS = ("base_url", "api_key_env", "concurrency", "price_prompt", "price_completion")
# engine-block fields handed to vllm.LLM by the in-process backends (None: vLLM's or the backend's default)
VLLM_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization", "dtype",
               "enforce_eager", "max_num_seqs", "quantization", "kv_cache_dtype")
OPENAI_FIELDS = ("base_url", "api_key_env", "concurrency", "timeout", "max_retries", "n", "prefill", "request_seeds")


def role_options(options: Mapping | None, role: str) -> dict:
    """The engine block as one role sees it: the role's overrides (``engine.roles.<role>``, non-null
    fields) over the block's own fields."""
    options = dict(options or {})
    overrides = (options.pop("roles", None) or {}).get(role) or {}
    return {**options, **{k: v for k, v in overrides.items() if v is not None}}


class RoleEngine:
    """One role's view of an engine: forwards the calls, counts the role's requests and tokens.

    ``stats`` are the role's own (summing the roles gives the engine's totals); ``load_seconds`` and
    the full ``describe()`` belong to the first role that uses the engine, the others name it.
    """

    def __init__(self, engine, role: str, first_role: str, prices: Mapping | None = None):
        self.base, self.role, self.first_role = engine, role, first_role
        self.prices = {k: v for k, v in (prices or {}).items() if v is not None}
        self.stats = {"calls": 0, "requests": 0, "prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0,
                      "requests_without_usage": 0}

    @property
    def last_info(self) -> dict:
        return getattr(self.base, "last_info", {})

    @property
    def load_seconds(self) -> float:
        return getattr(self.base, "load_seconds", 0.0) if self.role == self.first_role else 0.0

    def _attempts(self) -> int | None:
        """The engine's HTTP attempts so far (retries included), None for an engine that does not count them."""
        notes = self.base.usage_notes() if hasattr(self.base, "usage_notes") else {}
        return notes.get("http_attempts")

    def chat(self, conversations: Sequence, temperature: float, max_tokens: int, n: int = 1,
             **kwargs) -> list[list[str]]:
        before = self._attempts()
        try:
            out = self.base.chat(conversations, temperature=temperature, max_tokens=max_tokens, n=n, **kwargs)
        finally:   # a call that failed still made its attempts, and they are this role's
            if before is not None:
                spent = self.base.__dict__.setdefault("role_http_attempts", {})
                spent[self.role] = spent.get(self.role, 0) + (self._attempts() or 0) - before
        info = self.last_info or {}
        self.stats["calls"] += 1
        self.stats["requests"] += int(info.get("requests", len(conversations)))
        self.stats["prompt_tokens"] += int(info.get("prompt_tokens", 0))
        self.stats["generated_tokens"] += int(info.get("generated_tokens", 0))
        self.stats["seconds"] += float(info.get("seconds", 0.0))
        self.stats["requests_without_usage"] += int(info.get("requests_without_usage", 0))
        return out

    def reward(self, conversations: Sequence) -> list[list[float]]:
        self.stats["calls"] += 1
        self.stats["requests"] += len(conversations)
        return self.base.reward(conversations)

    def describe(self) -> dict:
        if self.role == self.first_role:
            return self.base.describe() if hasattr(self.base, "describe") else {"engine": type(self.base).__name__}
        return {"same_engine_as": self.first_role}

    def usage(self) -> dict:
        """The role's requests and tokens (``completion_tokens``: generated), and dollars when priced.

        A server that answered some requests without ``usage`` leaves the role's tokens unknown: they and the
        dollars are ``None`` (with ``requests_without_usage``), never a sum that counts those requests as 0."""
        out = {"requests": self.stats["requests"], "prompt_tokens": self.stats["prompt_tokens"],
               "completion_tokens": self.stats["generated_tokens"]}
        notes = self.base.usage_notes() if hasattr(self.base, "usage_notes") else {}
        if self.role == "judge" and "votes_sent_as" in notes:  # how the M votes went to the server
            out["votes_sent_as"] = notes["votes_sent_as"]
        if "http_attempts" in notes:  # this role's, retries included; the first role's also the engine's own
            spent = self.base.__dict__.get("role_http_attempts", {})
            out["http_attempts"] = spent.get(self.role, 0) if self.role != self.first_role else \
                notes["http_attempts"] - sum(v for r, v in spent.items() if r != self.first_role)
        unknown = self.stats["requests_without_usage"]
        if unknown:
            out.update(prompt_tokens=None, completion_tokens=None, requests_without_usage=unknown)
        if self.prices:
            out["dollars"] = None if unknown else round(self.stats["prompt_tokens"] * self.prices.get("price_prompt", 0.0) / 1e6
                                   + self.stats["generated_tokens"] * self.prices.get("price_completion", 0.0) / 1e6, 6)
        return out

    def __getattr__(self, name):  # model_path, llm, backend, ...: the engine's own
        if name == "base":  # not set yet (a copy under construction): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)


def usage_record(engines: Mapping) -> dict:
    """``{"usage": {role: {...}}}`` for a session of ``run_meta.json`` ({} for engines without roles)."""
    usage = {role: e.usage() for role, e in engines.items() if isinstance(e, RoleEngine)}
    if not usage:
        return {}
    if any("dollars" in u for u in usage.values()):
        dollars = [u.get("dollars", 0.0) for u in usage.values()]
        usage["total_dollars"] = None if None in dollars else round(sum(dollars), 6)
    return {"usage": usage}


def make_role_engines(models: Mapping[str, str], backend: str, task, seed: int = 0, max_model_len: int = 4096,
                      reward_roles: Sequence[str] = (), options: Mapping | None = None,
                      **engine_kwargs) -> dict[str, RoleEngine]:
    """One engine per distinct (model, server) of the roles, each role wrapped in a :class:`RoleEngine`.

    ``models``: role -> model; ``reward_roles``: roles served by a process reward model (vLLM's pooling
    runner); ``options``: the setting's ``engine`` block. ``engine_kwargs`` go to every engine.
    """
    from .backend import make_engine, resolve_backend

    backend = resolve_backend(backend)
    by_key: dict[tuple, tuple] = {}
    engines: dict[str, RoleEngine] = {}
    for role in ROLES:
        model = models[role]
        opts = role_options(options, role)
        server = opts.get("base_url") if backend == "openai" else None
        key = (model, server)
        if key not in by_key:
            extra = dict(engine_kwargs)
            if backend == "openai":
                extra.update({k: opts[k] for k in OPENAI_FIELDS if opts.get(k) is not None})
            elif backend != "fake":
                extra.update({k: opts[k] for k in VLLM_FIELDS if opts.get(k) is not None})
            if backend != "fake" and any(models[r] == model for r in reward_roles):
                extra["reward_model"] = True  # the openai backend refuses it by name
            by_key[key] = (make_engine(model, backend=backend, seed=seed, max_model_len=max_model_len, task=task,
                                       **extra), role)
        engine, first = by_key[key]
        engines[role] = RoleEngine(engine, role, first, {k: opts.get(k) for k in ("price_prompt", "price_completion")})
    return engines
