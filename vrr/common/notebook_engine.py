"""A papermill engine under which the notebooks run on one kernel share one kernel client
(``vrr.common.notebook_runner.run_notebook_chains``).

papermill's own engine starts a new kernel client per notebook, and every new client waits for the kernel's
readiness (jupyter_client's ``wait_for_ready`` sits at least 0.2 s on IOPub): a setting's five notebooks and the
namespace resets between them would pay it nine times. Here the first notebook's client is kept, and each next notebook
gets it after :data:`RESET_KERNEL`, sent through it so that its sockets stay in the one event-loop context nbclient
uses them from.
"""
from __future__ import annotations

from typing import Any

# between two notebooks of one kernel: a fresh namespace and execution counter, the imported libraries kept
RESET_KERNEL = "get_ipython().reset(new_session=True)"

SHARED_CLIENT_ENGINE = "vrr-shared-client"


def register_shared_client_engine(name: str = SHARED_CLIENT_ENGINE) -> dict:
    """Register the papermill engine ``name`` (module docstring) for the notebooks of one kernel; returns its
    holder, ``{"client": None}`` until the first notebook has started its client (a runner with several kernels
    registers one engine per kernel)."""
    from nbclient.util import ensure_async, run_sync
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger

    holder: dict[str, Any] = {"client": None}

    class SharedClientNotebookClient(PapermillNotebookClient):
        async def async_start_new_kernel_client(self):
            if holder["client"] is None:
                holder["client"] = await super().async_start_new_kernel_client()
                return holder["client"]
            self.kc = holder["client"]
            msg_id = await ensure_async(self.kc.execute(RESET_KERNEL, silent=True, store_history=False))
            reply = await self.async_wait_for_reply(msg_id)
            if reply is None or reply["content"]["status"] != "ok":
                raise RuntimeError(f"could not reset the kernel: {reply and reply['content']}")
            return self.kc

        start_new_kernel_client = run_sync(async_start_new_kernel_client)

    class SharedClientEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None,
                                     stderr_file=None, start_timeout=60, execution_timeout=None, **kwargs):
            # NBClientEngine.execute_managed_notebook with the client class above
            kwargs = {k: v for k, v in kwargs.items() if k not in ("input_path", "timeout", "startup_timeout")}
            return SharedClientNotebookClient(
                nb_man, **kwargs, timeout=execution_timeout, startup_timeout=start_timeout, kernel_name=kernel_name,
                log=logger, log_output=log_output, stdout_file=stdout_file,
                stderr_file=stderr_file).execute()

    papermill_engines.register(name, SharedClientEngine)
    return holder
