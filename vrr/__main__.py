"""``python -m vrr generate|resolve|label|measure-judge-styles ...`` (see ``vrr.chain.main``).

Errors in what the user gave (a setting, ``--set``, a run directory, an arrays file) print one line that
names the file and field, and exit with status 2; anything else keeps its traceback.
"""
import sys

from .chain import main
from .common.npzio import NpzFormatError
from .data.contract import DataContractError
from .loop.sandbox import SandboxError
from .loop.store import RunStoreError
from .settings import SettingConfigError

try:
    status = main()
except (SettingConfigError, NpzFormatError, DataContractError, RunStoreError, SandboxError) as exc:
    print(f"error: {exc}", file=sys.stderr)
    status = 2
raise SystemExit(status)
