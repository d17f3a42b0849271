"""The resolved generation config of one run: the setting YAML (``vrr.settings``) flattened into
what the loop runs, saved as ``config.json`` beside the data and checked on every resume.

:func:`run_config` is the only way a ``RunConfig`` is made from a setting: every protocol field
comes from the YAML (plus explicit overrides, which go through the same checks). The field names
are those of the committed runs' ``config.json`` files; fields added since (the judge's and the
repairer's models, the verifier kind, the task) are read from an older file with the values those
runs used (:func:`from_stored`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..settings import SettingConfigError
from .verifiers import JUDGE_MAX_TOKENS, LEGACY_JUDGE_MAX_TOKENS, VERIFIER_MAX_TOKENS


@dataclass
class RunConfig:
    """The resolved protocol of one generation run (App. B), flattened from the setting YAML."""

    setting: str
    dataset: str                       # the task
    model: str                         # generator
    judge_model: str
    repairer_model: str
    verifier: str                      # verifier kind
    backend: str
    split: str
    start: int
    n: int
    K_max: int
    M: int
    judge_style: str
    judge_max_tokens: int | None       # None: the style's default
    repair_style: str
    repair_mode: str                   # "repair" | "resample" (the independent-resampling control)
    gen_temperature: float
    judge_temperature: float
    repair_temperature: float
    gen_max_tokens: int
    repair_max_tokens: int
    perturb: str                       # "none" | "numeric" | "condition" | "auto"
    perturb_from_round: int            # plans p_k with from <= k <= to come from a perturbed repair prompt
    perturb_to_round: int | None       # None: K_max
    seed: int
    batch_size: int
    max_model_len: int
    probe_split: str | None
    probe_start: int
    probe_n: int
    probe_votes: int
    probe_from: str | None             # reuse the probe of another setting (same models and judge)
    notes: str = ""

    def judge_tokens(self) -> int:
        """The token budget of one vote: the setting's, else the verifier kind's default, else the judge style's."""
        return self.judge_max_tokens or VERIFIER_MAX_TOKENS.get(self.verifier) or JUDGE_MAX_TOKENS[self.judge_style]

    def perturbed_round(self, k: int) -> bool:
        if self.perturb == "none":
            return False
        hi = self.K_max if self.perturb_to_round is None else self.perturb_to_round
        return self.perturb_from_round <= k <= hi

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# Keys that may change between sessions of one run without changing what an instance is:
# how it is computed (batch size, backend, notes, context length) and the window LENGTHS
# (a run can be frozen at a prefix and extended later; config.json records the latest).
NON_PROTOCOL_KEYS = {"batch_size", "backend", "notes", "max_model_len"}
WINDOW_KEYS = {"n", "probe_n"}


def run_config(cfg: dict, setting: str | None = None) -> RunConfig:
    """Flatten a validated setting (``vrr.settings.load_config``) into the run's config.

    ``setting`` names the output folder when it differs from the setting's name (a swapped model).
    """
    if cfg["kind"] != "real":
        raise SettingConfigError(cfg.get("_path", cfg["name"]), "kind",
                                 "only real settings are generated (a simulated one is drawn by notebook 01)")
    pert, probe, temps, tokens = cfg["perturbation"], cfg["probe"], cfg["temperatures"], cfg["max_tokens"]
    return RunConfig(
        setting=setting or cfg["name"], dataset=cfg["task"], model=cfg["models"]["generator"],
        judge_model=cfg["models"]["judge"], repairer_model=cfg["models"]["repairer"],
        verifier=cfg["verifier"]["kind"], backend=cfg["engine"]["backend"],
        split=cfg["window"]["split"], start=cfg["window"]["start"], n=cfg["window"]["N"],
        K_max=cfg["K_max"], M=cfg["M"], judge_style=cfg["verifier"]["style"],
        judge_max_tokens=cfg["verifier"]["max_tokens"] or VERIFIER_MAX_TOKENS.get(cfg["verifier"]["kind"])
        or JUDGE_MAX_TOKENS[cfg["verifier"]["style"]], repair_style=cfg["repair"]["style"],
        repair_mode=cfg["repair"]["mode"], gen_temperature=temps["generate"], judge_temperature=temps["judge"],
        repair_temperature=temps["repair"], gen_max_tokens=tokens["generate"], repair_max_tokens=tokens["repair"],
        perturb=pert["edit"], perturb_from_round=pert["from_round"], perturb_to_round=pert["to_round"],
        seed=cfg["seed"], batch_size=cfg["engine"]["batch_size"], max_model_len=tokens["context"],
        probe_split=probe["split"], probe_start=probe["start"], probe_n=probe["n"], probe_votes=probe["M"], probe_from=probe["from"])


def from_stored(stored: dict[str, Any], source: str = "config.json") -> RunConfig:
    """A ``RunConfig`` from a saved ``config.json``. A config without judge, repairer and verifier fields
    (the single-model windows under ``data/real/``) ran one model in every role with an LLM judge, which is
    what is filled in."""
    data = dict(stored)
    data.setdefault("judge_model", data.get("model"))
    data.setdefault("repairer_model", data.get("model"))
    data.setdefault("verifier", "llm_judge")
    if data.get("judge_max_tokens") is None and data.get("judge_style") in LEGACY_JUDGE_MAX_TOKENS:
        # written before budgets were resolved into config.json: the default it ran with
        data["judge_max_tokens"] = VERIFIER_MAX_TOKENS.get(data["verifier"]) or \
            LEGACY_JUDGE_MAX_TOKENS[data["judge_style"]]
    known = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{source}: field '{unknown[0]}': unknown key in a run config")
    missing = sorted(f.name for f in dataclasses.fields(RunConfig)
                     if f.name not in data and f.default is dataclasses.MISSING)
    if missing:
        raise ValueError(f"{source}: field '{missing[0]}' missing (fields missing: {', '.join(missing)})")
    for f in dataclasses.fields(RunConfig):
        if f.name in data and not _has_type(data[f.name], f.type):
            raise ValueError(f"{source}: field '{f.name}' is {data[f.name]!r}, expected {f.type}")
    for name in ("start", "n", "probe_start", "probe_n", "K_max"):
        if data[name] < 0:
            raise ValueError(f"{source}: field '{name}' is {data[name]}, expected >= 0")
    return RunConfig(**data)


def _has_type(value: Any, annotation: str) -> bool:
    """Whether a stored JSON value fits a field annotation of RunConfig ("int", "str | None", ...)."""
    for name in (part.strip() for part in annotation.split("|")):
        if name == "None" and value is None:
            return True
        if name == "str" and isinstance(value, str):
            return True
        if name == "int" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if name == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
    return False


def protocol_differences(stored: RunConfig, requested: RunConfig) -> list[str]:
    """The protocol fields in which two configs differ (window lengths and ``NON_PROTOCOL_KEYS`` excluded)."""
    a, b = stored.to_json(), requested.to_json()
    return sorted(k for k in a if k not in NON_PROTOCOL_KEYS | WINDOW_KEYS and a[k] != b[k])
