"""``python -m vrr generate|resolve|label|measure-judge-styles ...`` (see ``vrr.chain.main``).

Errors in what the user gave (a setting, ``--set``, a window past its dataset's end, an out root or run
directory, an arrays file) print one line that names the file and field, and a server that fails for good
(``engine.backend: openai``) one line that names the server, and an in-process engine this interpreter cannot run
(no vllm module) one line that says what to run instead, and an install without the extra ``repro`` one line
that says how to add it; all exit with status 2. Anything else keeps its traceback.
"""
import sys

try:
    from .chain import main
except ModuleNotFoundError as exc:   # an install with the controller's dependencies only (NumPy, SciPy)
    if exc.name not in ("yaml", "tqdm", "statsmodels", "matplotlib"):
        raise
    print(f"error: python -m vrr runs the reproduction, which needs the extra 'repro' (no module {exc.name!r} "
          "here): pip install \"vrr[repro] @ file:///path/to/the/clone\"", file=sys.stderr)
    raise SystemExit(2) from None
from .common.npzio import NpzFormatError
from .data.contract import DataContractError
from .loop.engine.backend import EngineUnavailableError
from .loop.engine.openai_backend import ServerError
from .loop.sandbox import SandboxError
from .loop.store import RunStoreError, WindowError
from .settings import SettingConfigError

try:
    status = main()
except (SettingConfigError, NpzFormatError, DataContractError, RunStoreError, WindowError, SandboxError,
        ServerError, EngineUnavailableError) as exc:
    print(f"error: {exc}", file=sys.stderr)
    status = 2
raise SystemExit(status)
