"""``python -m vrr generate|resolve|label|measure-judge-styles ...`` (see ``vrr.chain.main``).

Errors in what the user gave (a setting, ``--set``, a window past its dataset's end, an out root or run
directory, an arrays file) print one line that names the file and field, and a server that fails for good
(``engine.backend: openai``) one line that names the server, and an in-process engine this interpreter cannot run
(no vllm module) one line that says what to run instead; all exit with status 2. Anything else keeps its traceback.
"""
import sys

from .chain import main
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
