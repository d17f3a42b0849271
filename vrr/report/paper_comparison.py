"""The paper's printed validity values beside this repository's simulated settings (06_figures).

``paper_values.csv`` (next to this module) is the one transcription of every validity value the paper prints for
a setting simulated here: the setting and policy it belongs to, the value as printed, and where it is printed
(the table's LaTeX label, or the section's for a value in the text, the .tex line, the row's first cell or the
phrase beside the value, and the column header). ``tests/test_paper_comparison.py`` checks each entry against
``../shared/paper/vrr-stop.tex``.

:func:`table_paper_comparison` writes one row per (setting, policy) the paper prints, with

* the paper's value (its most precise printing; every printing of it is listed in ``sources``);
* ours: the simulated setting's V with its 95 % percentile bootstrap CI (``results/<setting>/stats.json``), or for a
  round's validity Q_k the same bootstrap of the window's labels;
* the value the paper's parameters imply: the same policy replayed on ``IMPLIED_N`` instances drawn from the
  paper's four-parameter stationary model (the setting's ``params``, binomial votes, no schedule) under the
  setting's protocol with the paper's label-free binomial EM (:func:`implied_values`, computed in the setting's
  04_replay and cached beside its results by a content hash of its inputs), with its binomial 95 % CI;
* the verdict (``VERDICTS``): reproduced (the paper's value is inside our CI), the paper's value is inconsistent
  with its own parameters (outside the implied value's CI while our CI holds the implied value), or our model
  differs, with how (:func:`model_departures`). A printed value stands for an interval of half a unit in its last
  digit, which every inside-test allows for. Our value agrees with the implied one where their CIs overlap (two
  independent draws of one model disagree at a 95 % CI's edge one time in twenty, overlapping CIs far less often).
"""
from __future__ import annotations

import csv
import hashlib
import inspect
import json
import re
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from ..common.jsonio import read_json, write_json
from ..common.paths import REPO_ROOT
from . import render as rep

PAPER_VALUES = Path(__file__).with_name("paper_values.csv")
PAPER_TEX = REPO_ROOT.parent / "shared" / "paper" / "vrr-stop.tex"
PAPER_VALUE_FIELDS = ("setting", "policy", "value", "table", "line", "row", "column")
IMPLIED_N = 200_000
IMPLIED_CACHE = "paper_implied.json"
IMPLIED_POLICIES = ("No repair", "Majority stopping", "ConfStop", "Fixed", "Accepted-first", "Last-accepted",
                    "Verifier-best", "VRR-Stop", "VRR-Guard", "TPM reference")
ROUND_POLICY = re.compile(r"^Validity at round (\d+)$")
REPRODUCED = "reproduced"
INCONSISTENT = "the paper's value is inconsistent with its own parameters"
DIFFERS = "our model differs"
VERDICTS = (REPRODUCED, INCONSISTENT, DIFFERS)
CALIBRATED_POLICIES = ("VRR-Stop",)   # the transcribed policies whose decisions read the window's calibration
Z95 = 1.959963984540054


class PaperValuesError(ValueError):
    """A malformed entry of the transcription; the message names the file, the line and the field."""


def read_paper_values(path: str | Path = PAPER_VALUES) -> list[dict]:
    """The transcription, checked: every field present, ``value`` a decimal as printed, ``line`` a positive whole
    number; each row a dict of strings with ``line`` an int."""
    path = Path(path)
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != PAPER_VALUE_FIELDS:
            raise PaperValuesError(f"{path}: the header must be {','.join(PAPER_VALUE_FIELDS)}, got {reader.fieldnames}")
        for i, row in enumerate(reader, start=2):
            for key in PAPER_VALUE_FIELDS:
                if row[key] is None or (key != "column" and not row[key].strip()):
                    raise PaperValuesError(f"{path}:{i}: field '{key}': missing")
            if not re.fullmatch(r"\d+\.\d+", row["value"]):
                raise PaperValuesError(f"{path}:{i}: field 'value': {row['value']!r} is not a decimal as printed")
            if not row["line"].isdigit() or int(row["line"]) < 1:
                raise PaperValuesError(f"{path}:{i}: field 'line': {row['line']!r} is not a line number")
            rows.append({**row, "line": int(row["line"])})
    return rows


def _half_unit(printed: str) -> float:
    """Half a unit in the last printed digit: the rounding a printed value stands for."""
    return 0.5 * 10.0 ** -len(printed.split(".")[1])


def paper_value_groups(values: Sequence[dict]) -> list[dict]:
    """One entry per (setting, policy) in order of first appearance: the most precise printing (``printed``, its
    float ``value`` and rounding half-unit ``rounding``) and every place it is printed (``sources``). Printings
    that disagree beyond their rounding are refused."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for v in values:
        groups.setdefault((v["setting"], v["policy"]), []).append(v)
    out = []
    for (setting, policy), items in groups.items():
        best = max(items, key=lambda v: len(v["value"]))
        for v in items:
            if abs(float(v["value"]) - float(best["value"])) > _half_unit(v["value"]) + _half_unit(best["value"]):
                raise PaperValuesError(f"{setting}, {policy}: the paper prints {best['value']} ({best['table']}, line "
                                       f"{best['line']}) and {v['value']} ({v['table']}, line {v['line']})")
        out.append({"setting": setting, "policy": policy, "printed": best["value"], "value": float(best["value"]),
                    "rounding": _half_unit(best["value"]),
                    "sources": "; ".join(f"{v['table']}:{v['line']}" for v in items)})
    return out


def model_departures(cfg: dict) -> list[str]:
    """How a simulated setting departs from the paper's four-parameter stationary model with binomial votes and
    its label-free binomial EM, in words (empty: none)."""
    out = []
    c = cfg.get("judge_concentration")
    if c is not None:
        out.append(f"votes are beta-binomial (judge concentration {c:g}, intra-class vote correlation "
                   f"{1 / (c + 1):.2f}) where the paper's model has independent votes")
    if "schedule" in cfg:
        sched = cfg["schedule"]
        out.append(f"repair is round-dependent (alpha, beta switch to {sched['perturbed']['alpha']:g}, "
                   f"{sched['perturbed']['beta']:g} from round {sched['start_round']}), parameters this repository "
                   "chose; the paper prints none for this setting")
    if cfg["calibration"]["method"] != "binomial_em":
        out.append(f"calibration {cfg['calibration']['method']} where the paper uses the label-free binomial EM")
    if cfg.get("assumptions"):
        out.append(f"assumed: {cfg['assumptions']}")
    return out


# ---------------------------------------------------------------- the value the paper's parameters imply
def _implied_inputs(names: Sequence[str], n: int, seed: int) -> dict:
    """Everything :func:`implied_values` reads: each setting's parameters and protocol, N, the seed, the policies and
    the source of the code that draws and replays (so that a changed rule recomputes the cache)."""
    from ..data import simulate
    from ..calibration import estimators, mixture
    from ..core import belief
    from ..policies import replay, rules
    from ..settings import load_config

    settings = {}
    for name in names:
        cfg = load_config(name)
        settings[name] = {k: cfg[k] for k in ("params", "K_max", "M", "seed", "calibration")}
    code = {m.__name__: hashlib.sha256(inspect.getsource(m).encode()).hexdigest()
            for m in (simulate, estimators, mixture, belief, replay, rules)}
    return {"settings": settings, "n": int(n), "seed": int(seed), "policies": list(IMPLIED_POLICIES), "code": code}


def implied_values(names: Sequence[str], cache_dir: str | Path, n: int = IMPLIED_N, seed: int = 0) -> dict:
    """{setting: {policy: V}}: each policy replayed on ``n`` instances drawn from the paper's four-parameter
    stationary model with the setting's ``params`` (binomial votes, K_max, M), under the setting's protocol with
    the paper's label-free binomial EM (``ReplayConfig.from_setting``, cross-fit seed ``seed``). The draw's seed
    is ``vrr.data.simulate.simulation_seed`` of "<setting>:implied" with the setting's seed, independent of the
    setting's own window and of the other settings. Cached per setting in ``cache_dir/<setting>/paper_implied.json``
    under the SHA-256 of every input (:func:`_implied_inputs`); a cache for other inputs is recomputed."""
    from ..core.model import NoiseParams
    from ..data.simulate import simulate_setting, simulation_seed
    from ..policies.replay import ReplayConfig, replay
    from ..settings import load_config

    values = {}
    for name in sorted(set(names)):
        inputs = _implied_inputs([name], n, seed)
        key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
        path = Path(cache_dir) / name / IMPLIED_CACHE
        if path.is_file():
            cached = read_json(path)
            if cached.get("key") == key:
                values[name] = cached["values"][name]
                continue
        cfg = load_config(name)
        params = NoiseParams(**{k: float(cfg["params"][k]) for k in ("rho0", "rho1", "alpha", "beta", "pi")})
        setting = simulate_setting(params, n=n, k_max=int(cfg["K_max"]), M=int(cfg["M"]),
                                   seed=simulation_seed(f"{name}:implied", cfg["seed"]), name=name)
        config = ReplayConfig.from_setting(cfg, seed=seed, method="binomial_em", vote_rounds="first",
                                           likelihood="binomial")
        res = replay(setting, config, policies=IMPLIED_POLICIES)
        values[name] = {policy: float(v.mean()) for policy, v in res.validity.items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"key": key, "inputs": inputs, "values": {name: values[name]}})
    return values


def _has_implied_values(cfg: dict) -> bool:
    """Whether the paper's parameters imply values for a transcribed setting: its model is the paper's stationary
    one (no round-dependent ``schedule``, for which the paper prints no parameters)."""
    return "schedule" not in cfg


def setting_implied_values(setting: str, results_root: str | Path, n: int = IMPLIED_N,
                           seed: int = 0) -> dict | None:
    """:func:`implied_values` of one setting, computed (and cached under ``results_root/<setting>/``) while the
    setting's own steps run, so that 06's :func:`table_paper_comparison` only reads it; None where the paper prints
    no value for the setting or no parameters for its model."""
    from ..settings import load_config

    if setting not in {g["setting"] for g in paper_value_groups(read_paper_values())}:
        return None
    if not _has_implied_values(load_config(setting)):
        return None
    return implied_values([setting], results_root, n=n, seed=seed)[setting]


def binomial_interval(v: float, n: int) -> tuple[float, float]:
    """The normal-approximation 95 % CI of a proportion ``v`` of ``n`` instances (the implied value's; at
    n = 200,000 it is at most 0.22 pp wide on either side)."""
    half = Z95 * np.sqrt(v * (1.0 - v) / n)
    return v - half, v + half


def _round_interval(y, k: int, n_resamples: int, seed: int) -> tuple[float, float, float]:
    """Q_k with its percentile bootstrap CI, on counts: resampling N instances of a 0/1 column is a binomial draw
    of its count (App. G's instance-level bootstrap)."""
    from ..stats.inference import percentile_interval

    col = np.asarray(y)[:, k].astype(bool)
    n, hits = col.size, int(col.sum())
    draws = np.random.default_rng(seed).binomial(n, hits / n, size=n_resamples) / n
    low, high = percentile_interval(draws)
    return hits / n, float(low), float(high)


def _inside(value: float, rounding: float, low: float, high: float) -> bool:
    return low - rounding <= value <= high + rounding


def verdict(paper: float, rounding: float, ours: tuple[float, float, float],
            implied: tuple[float, float, float] | None, departures: Sequence[str],
            calibrated: bool = False) -> tuple[str, str]:
    """(verdict, how) of one paper value (module docstring): ``ours`` and ``implied`` are (value, low, high);
    ``implied`` None where the paper prints no parameters for the setting; ``calibrated``: the policy reads the
    window's calibration (VRR-Stop), so that our window's value also carries its calibration's draw."""
    v, lo, hi = ours
    if _inside(paper, rounding, lo, hi):
        return REPRODUCED, ""
    if implied is not None:
        iv, ilo, ihi = implied
        if not _inside(paper, rounding, ilo, ihi) and lo <= ihi and ilo <= hi:
            return INCONSISTENT, f"its parameters imply {iv:.3f} [{ilo:.3f},{ihi:.3f}]"
    how = list(departures)
    if implied is not None:
        iv, ilo, ihi = implied
        if _inside(paper, rounding, ilo, ihi):
            how.append(f"the paper's parameters imply {iv:.3f}, as printed, where our window gives {v:.3f}")
        else:
            how.append(f"the paper's stationary binomial model implies {iv:.3f}")
    if not departures:
        how.insert(0, "no departure from the paper's model; our window is one draw of it"
                      + (" and of its calibration (300 labeled transition pairs, label-free EM)" if calibrated else ""))
    return DIFFERS, "; ".join(how)


def paper_comparison_rows(results_root: str | Path, values: Sequence[dict] | None = None,
                          implied_n: int = IMPLIED_N, seed: int = 0, n_resamples: int = 10_000) -> list[dict]:
    """The rows of :func:`table_paper_comparison` for every transcribed (setting, policy) whose setting has results
    under ``results_root`` (``stats.json`` and ``calibration.json``)."""
    from ..data.contract import load_setting
    from ..settings import load_config

    groups = paper_value_groups(read_paper_values() if values is None else values)
    root = Path(results_root)
    present = [s for s in dict.fromkeys(g["setting"] for g in groups)
               if (root / s / "stats.json").is_file() and (root / s / "calibration.json").is_file()]
    configs = {s: load_config(s) for s in present}
    with_params = [s for s in present if _has_implied_values(configs[s])]
    implied = implied_values(with_params, root, n=implied_n, seed=seed) if with_params else {}
    rows = []
    for g in groups:
        name = g["setting"]
        if name not in configs:
            continue
        cfg = configs[name]
        round_k = ROUND_POLICY.match(g["policy"])
        calibration = read_json(root / name / "calibration.json")
        n_ours = int(calibration["loop_dynamics"]["N"])
        if round_k:
            ours = _round_interval(load_setting(Path(calibration["arrays_path"])).y, int(round_k.group(1)),
                                   n_resamples, seed)
        else:
            by_policy = {r["policy"]: r for r in read_json(root / name / "stats.json")["policy_table"]}
            if g["policy"] not in by_policy:
                raise ValueError(f"{PAPER_VALUES}: {name} has no policy {g['policy']!r} in its stats.json")
            r = by_policy[g["policy"]]
            ours = (r["V"], r["V_low"], r["V_high"])
        imp = None
        if name in implied and g["policy"] in implied[name]:
            iv = implied[name][g["policy"]]
            imp = (iv, *binomial_interval(iv, implied_n))
        label, how = verdict(g["value"], g["rounding"], ours, imp, model_departures(cfg),
                             calibrated=g["policy"] in CALIBRATED_POLICIES)
        rows.append({"setting": name, "label": cfg["label"], "policy": g["policy"], "paper": g["printed"],
                     "sources": g["sources"], "ours": ours[0], "ours_low": ours[1], "ours_high": ours[2],
                     "ours_text": rep.interval_text(*ours), "N": n_ours,
                     "implied": imp[0] if imp else float("nan"), "implied_low": imp[1] if imp else float("nan"),
                     "implied_high": imp[2] if imp else float("nan"),
                     "implied_text": rep.interval_text(*imp) if imp else "n/a (no parameters printed)",
                     "implied_N": implied_n if imp else "", "verdict": label, "how": how})
    return rows


def table_paper_comparison(results_root: str | Path, out_dir: Path, implied_n: int = IMPLIED_N, seed: int = 0,
                           n_resamples: int = 10_000) -> list[dict]:
    """Write ``paper_comparison.csv`` and ``.tex`` (module docstring) and return its rows; nothing where no setting
    of the transcription has results."""
    rows = paper_comparison_rows(results_root, implied_n=implied_n, seed=seed, n_resamples=n_resamples)
    if rows:
        rep.write_table(rows, [(c, c) for c in ("setting", "policy", "paper", "ours", "ours_low", "ours_high", "N",
                                                "implied", "implied_low", "implied_high", "implied_N", "verdict",
                                                "how", "sources")],
                        out_dir / "paper_comparison",
                        caption=f"Every validity value the paper prints for a setting simulated here, beside the "
                                f"simulated value and the value the paper's four-parameter model implies "
                                f"({implied_n:,} simulated instances).",
                        tex_columns=[("label", "Setting"), ("policy", "Policy"), ("paper", "Paper"),
                                     ("ours_text", "Ours V [95% CI]"), ("N", "N"),
                                     ("implied_text", "Implied V [95% CI]"), ("verdict", "Verdict"), ("how", "How"),
                                     ("sources", "Printed at (label:line)")])
    return rows


def paper_comparison_summary(rows: Sequence[dict]) -> str:
    """A short Markdown paragraph for the README: how many of the paper's values the table holds and the count of
    each verdict (``rows``: :func:`paper_comparison_rows`, or the CSV's rows)."""
    counts = Counter(r["verdict"] for r in rows)
    unknown = sorted(set(counts) - set(VERDICTS))
    if unknown:
        raise ValueError(f"paper comparison: unknown verdict {unknown[0]!r}")
    settings = len({r["setting"] for r in rows})
    return (f"Of the {len(rows)} validity values the paper prints for the {settings} settings simulated here "
            f"(`results/tables/paper_comparison.csv`), {counts[REPRODUCED]} are reproduced (inside our 95 % CI), "
            f"{counts[INCONSISTENT]} are inconsistent with the paper's own parameters (outside the value its "
            f"four-parameter model implies at {IMPLIED_N:,} instances, which our CI holds), and "
            f"{counts[DIFFERS]} {'differs' if counts[DIFFERS] == 1 else 'differ'} because our model differs (the table "
            f"says how).\n")
