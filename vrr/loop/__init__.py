"""The LLM verify-repair loop (01_generate): engine backends, task and verifier plug-ins, prompts,
the run config resolved from a setting, the frozen-trajectory runner and the trajectory store.

Nothing here imports vLLM until an engine is built (``vrr.loop.engine.make_engine``).
"""
from .config import RunConfig, from_stored, run_config  # noqa: F401
from .store import RunPaths  # noqa: F401
from .tasks import Task, get_task  # noqa: F401
from .verifiers import LLMJudge, make_verifier  # noqa: F401
