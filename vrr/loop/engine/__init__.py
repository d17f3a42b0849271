"""Generation engine: vLLM offline API on GPU (``vllm``) or CPU (``vllm-cpu``), any OpenAI-compatible server
(``openai``: docs/scale.md), and a fake backend for tests; see docs/engine.md. Imports are lazy:
``import vrr.loop.engine`` imports neither vLLM, torch nor the openai client.
"""
from .backend import BACKENDS, make_engine, resolve_backend, vllm_available  # noqa: F401
from .fake import FakeEngine  # noqa: F401
from .openai_backend import OpenAIEngine, ServerError  # noqa: F401
from .roles import make_role_engines  # noqa: F401
