"""Tables (CSV + LaTeX booktabs) and figures (PNG + PDF) of the paper, from saved results only."""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Sequence

import functools

import numpy as np

from ..common.atomic import atomic_write
from ..core.belief import boundary, gain


@functools.lru_cache(maxsize=None)
def _pyplot():
    """matplotlib.pyplot on the Agg backend with the paper's style, imported on the first figure (the
    tables need no matplotlib, and importing it costs every notebook kernel that writes one ~0.5 s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 150, "savefig.dpi": 200, "font.size": 8, "axes.titlesize": 8,
                         "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7, "ytick.labelsize": 7,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


COLUMN_WIDTH = 3.3   # inches, one column of the AAAI format
CSV_SIGNIFICANT_DIGITS = 6  # CSV numbers: enough for every reported value, few enough that float noise of
                            # another BLAS or CPU does not show (17 digits did)
# No timestamps or tool versions in the figure files, so two runs write the same bytes.
PDF_METADATA = {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}
PNG_METADATA = {"Software": None}
TEXT_WIDTH = 7.0


# ---------------------------------------------------------------- tables
def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "--"
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.1e}"
        return f"{value:.{digits}f}"
    return str(value)


def rate_text(x: float, digits: int) -> str:
    """A rate to ``digits`` decimals, or "n/a" where it is undefined (nan): a window or screen with no plan of
    the class it is a rate of (rho1 and beta need valid plans, rho0 and alpha invalid ones)."""
    return "n/a" if np.isnan(x) else f"{x:.{digits}f}"


def write_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]], stem: str | os.PathLike,
                caption: str = "", digits: int = 3, csv_decimals: int | None = None,
                tex_columns: Sequence[tuple[str, str]] | None = None) -> tuple[Path, Path]:
    """Write ``rows`` as ``stem.csv`` (numbers to ``CSV_SIGNIFICANT_DIGITS`` significant digits, or to
    ``csv_decimals`` decimals where given) and ``stem.tex`` (booktabs, formatted).

    ``columns`` is a list of (key, header); ``tex_columns`` (default: ``columns``) those of the .tex, where a
    table prints formatted texts in place of the CSV's numbers. Both files are written atomically.
    """
    tex_columns = columns if tex_columns is None else tex_columns
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    csv_path, tex_path = stem.with_suffix(".csv"), stem.with_suffix(".tex")
    atomic_write(csv_path, lambda fh: _csv(fh, rows, columns, csv_decimals))
    lines = ["\\begin{table}[t]", "\\centering", "\\small"]
    if caption:
        lines.append(f"\\caption{{{_tex_escape(caption)}}}")
    lines += [f"\\begin{{tabular}}{{l{'c' * (len(tex_columns) - 1)}}}", "\\toprule",
              " & ".join(_tex_escape(h) for _, h in tex_columns) + " \\\\", "\\midrule"]
    for row in rows:
        lines.append(" & ".join(_tex_escape(_fmt(row.get(k), digits)) for k, _ in tex_columns) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    atomic_write(tex_path, lambda fh: fh.write("\n".join(lines)))
    return csv_path, tex_path


def csv_value(value, decimals: int | None = None):
    """A table cell for the CSV: floats to ``decimals`` decimals, or by default to a stated number of
    significant digits."""
    if isinstance(value, (bool, np.bool_)):
        return value
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "nan"
        return f"{float(value):.{decimals}f}" if decimals is not None else f"{float(value):.{CSV_SIGNIFICANT_DIGITS}g}"
    return value


def _csv(fh, rows, columns, decimals: int | None = None):
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow([k for k, _ in columns])
    for row in rows:
        writer.writerow([csv_value(row.get(k, ""), decimals) for k, _ in columns])


def _tex_escape(text: str) -> str:
    for a, b in (("\\", "\\textbackslash{}"), ("&", "\\&"), ("%", "\\%"), ("_", "\\_"), ("#", "\\#")):
        text = text.replace(a, b)
    return text.replace("<K>", "$\\langle K\\rangle$")


def read_csv(path: str | os.PathLike) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def interval_text(v, lo, hi) -> str:
    """'0.722 [.682,.760]' as in the paper's tables."""
    def short(x):
        s = f"{x:.3f}"
        return s[1:] if s.startswith("0.") else s
    return f"{v:.3f} [{short(lo)},{short(hi)}]"


def paired_interval_text(dv, lo, hi) -> str:
    """'+0.270 [+0.180,+0.360]': a paired difference with its CI, signed."""
    return f"{dv:+.3f} [{lo:+.3f},{hi:+.3f}]"


# ---------------------------------------------------------------- figures
def save_figure(fig, stem: str | os.PathLike) -> tuple[Path, Path]:
    """Save a figure as ``stem.png`` and ``stem.pdf``."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for ext, metadata in ((".png", PNG_METADATA), (".pdf", PDF_METADATA)):
        path = stem.with_suffix(ext)
        tmp = path.with_name(f".{path.stem}.tmp{ext}")
        fig.savefig(tmp, bbox_inches="tight", metadata=metadata)
        os.replace(tmp, path)
        out.append(path)
    _pyplot().close(fig)
    return tuple(out)


class FigureWriter:
    """:func:`save_figure` in a second process, while the caller draws the next figure: 06's figures are half of its
    time, and the chain's last step has the machine's other core to itself.

    ``save(fig, stem)`` pickles the figure, closes it here and queues it; the worker (spawned, so it shares no
    state with the kernel, on Agg with the paper's style) writes ``stem.png`` and ``stem.pdf`` with
    :func:`save_figure`: the same bytes (``tests/test_figure_writer.py``; ``make reproduce`` rewrites the committed
    figures byte for byte).
    ``close()`` waits for every figure and raises the first failure; before it returns a figure's files may not
    exist yet. The worker dies with its parent (``PR_SET_PDEATHSIG``), so a stopped 06 leaves no process."""

    def __init__(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_figure_worker_start, initargs=(os.getpid(),))
        self._pending: list = []

    def save(self, fig, stem: str | os.PathLike) -> None:
        import pickle

        data = pickle.dumps(fig)
        _pyplot().close(fig)
        self._pending.append(self._pool.submit(_save_pickled_figure, data, str(stem)))

    def close(self) -> list[tuple[Path, Path]]:
        """Wait for every queued figure; the (png, pdf) paths in the order saved."""
        try:
            return [future.result() for future in self._pending]
        finally:
            self._pending = []
            self._pool.shutdown(cancel_futures=True)


def _figure_worker_start(parent: int) -> None:
    import signal

    from ..common.processes import death_signal_preexec

    death_signal_preexec(signal.SIGKILL, parent)()   # and gone at once if the parent already is
    _pyplot()


def _save_pickled_figure(data: bytes, stem: str) -> tuple[Path, Path]:
    import pickle

    return save_figure(pickle.loads(data), stem)


def fig_signal_quality(rows: Sequence[dict]):
    """Signal-quality decoupling (Fig. motivation/Sec. 3): true validity Q_k (solid) and judge
    acceptance A_k (dashed) per round, one panel per setting."""
    fig, axes = _pyplot().subplots(1, len(rows), figsize=(TEXT_WIDTH, 2.0), squeeze=False)
    for ax, row in zip(axes[0], rows):
        k = np.arange(len(row["Q"]))
        ax.plot(k, row["Q"], "-o", ms=3, color="C0", label="true validity $Q_k$")
        ax.plot(k, row["A"], "--s", ms=3, color="C3", label="acceptance $A_k$")
        ax.set_title(row["label"])
        ax.set_xlabel("repair round $k$")
        ax.set_ylim(0, 1)
        ax.set_xticks(k)
    axes[0][0].set_ylabel("rate")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, frameon=False, bbox_to_anchor=(0.5, 1.08))
    fig.tight_layout()
    return fig


def fig_gain_geometry(operators: Sequence[dict]):
    """Gain geometry (App. A figure): G(b) = (1-b) alpha - b beta for measured (alpha, beta),
    with b* = alpha/(alpha+beta) dashed."""
    fig, ax = _pyplot().subplots(figsize=(COLUMN_WIDTH, 2.3))
    b = np.linspace(0, 1, 201)
    for i, op in enumerate(operators):
        color = f"C{i}"
        ax.plot(b, gain(b, op["alpha"], op["beta"]), color=color,
                label=f"{op['label']} ($\\alpha$={op['alpha']:.2f}, $\\beta$={op['beta']:.2f})")
        b_star = boundary(op["alpha"], op["beta"])
        if np.isfinite(b_star):
            ax.axvline(b_star, color=color, ls="--", lw=0.8)
            ax.annotate(f"$b^*$={b_star:.2f}", (b_star, op["alpha"] * 0.9), fontsize=6, color=color,
                        xytext=(2, 0), textcoords="offset points")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("belief $b$ that the current plan is valid")
    ax.set_ylabel("one-step gain $G(b)$")
    ax.legend(frameon=False, loc="lower left")
    fig.tight_layout()
    return fig


def fig_cross_setting(rows: Sequence[dict], ncols: int = 4):
    """Cross-setting dynamics (App. C figure): mean true validity per round under unconditional repair.
    A row with ``kind == "real"`` (LLM trajectories) is drawn solid and titled "real"; a simulated one
    dashed and titled "sim.", so that the two kinds are never confused."""
    n = len(rows)
    nrows = int(np.ceil(n / ncols))
    fig, axes = _pyplot().subplots(nrows, ncols, figsize=(TEXT_WIDTH, 1.7 * nrows), sharey=True, squeeze=False)
    for ax, row in zip(axes.ravel(), rows):
        k = np.arange(len(row["Q"]))
        real = row.get("kind") == "real"
        ax.plot(k, row["Q"], "-o" if real else "--o", ms=3, color="C0" if real else "C7",
                mfc="C0" if real else "white")
        ax.set_title(f"{row['label'].replace(' (sim.)', '')} [{'real' if real else 'sim.'}]\n{row['shape']}")
        ax.set_ylim(0, 1)
        ax.set_xticks(k)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("true validity")
    for ax in axes[-1, :]:
        ax.set_xlabel("round $k$")
    fig.tight_layout()
    return fig


def fig_probe_separation(rates, labels, em_accept_valid: float, em_accept_invalid: float, title: str = ""):
    """Probe separation (App. E figure): per-plan acceptance by true validity (a) with class
    means (solid) and label-free EM estimates (dashed), and the class distributions (b)."""
    rates = np.asarray(rates, dtype=float)
    labels = np.asarray(labels).astype(bool)
    fig, (ax_a, ax_b) = _pyplot().subplots(1, 2, figsize=(COLUMN_WIDTH * 1.6, 2.1))
    rng = np.random.default_rng(0)
    for cls, color, name in ((True, "C2", "valid"), (False, "C3", "invalid")):
        r = rates[labels == cls]
        x = (0 if cls else 1) + rng.uniform(-0.2, 0.2, r.size)
        ax_a.scatter(x, r, s=4, alpha=0.4, color=color)
        if r.size:
            ax_a.hlines(r.mean(), -0.4, 1.4, color=color, lw=1.2, label=f"{name} mean {r.mean():.2f}")
            ax_b.hist(r, bins=np.linspace(0, 1, 18), alpha=0.5, color=color, density=True, label=name)
    ax_a.hlines(em_accept_valid, -0.4, 1.4, color="C2", ls="--", lw=1, label=f"EM valid {em_accept_valid:.2f}")
    ax_a.hlines(em_accept_invalid, -0.4, 1.4, color="C3", ls="--", lw=1, label=f"EM invalid {em_accept_invalid:.2f}")
    ax_a.set_xticks([0, 1], ["valid", "invalid"])
    ax_a.set_ylabel("per-plan acceptance rate")
    ax_a.set_title("(a) plans")
    handles, labels = ax_a.get_legend_handles_labels()
    ax_b.set_xlabel("acceptance rate")
    ax_b.set_title("(b) class distributions")
    ax_b.legend(frameon=False)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.legend(handles, labels, loc="upper center", ncol=4, frameon=False, fontsize=6, bbox_to_anchor=(0.5, 0.02))
    return fig


def fig_flip_grid(j_values, delta_edges, rate, markers: Sequence[dict] = ()):
    """Identifiability (RQ3 figure): flip probability over (J, Delta), real verifiers marked."""
    fig, ax = _pyplot().subplots(figsize=(COLUMN_WIDTH, 2.5))
    j_values = np.asarray(j_values)
    dj = np.diff(j_values).mean() if j_values.size > 1 else 0.1
    j_edges = np.concatenate([[j_values[0] - dj / 2], (j_values[:-1] + j_values[1:]) / 2, [j_values[-1] + dj / 2]])
    mesh = ax.pcolormesh(np.asarray(delta_edges), j_edges, np.ma.masked_invalid(rate), cmap="magma_r",
                         vmin=0, vmax=max(0.3, float(np.nanmax(rate))), shading="flat")
    fig.colorbar(mesh, ax=ax, label="flip probability")
    for m in markers:
        ax.plot(m["delta"], m["J"], marker="o", mfc="white", mec="k", ms=5)
        right = m["delta"] > 0.6
        ax.annotate(m["label"], (m["delta"], m["J"]), fontsize=5.5, xytext=(-5 if right else 5, 3),
                    textcoords="offset points", ha="right" if right else "left",
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.7))
    ax.set_xlabel("decision margin $\\Delta=|G-\\tau|$")
    ax.set_ylabel("judge discrimination $J$")
    fig.tight_layout()
    return fig


PARETO_MARKERS = "osD^vP<>Xph*d"
PARETO_COLORS = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "black", "#e7298a", "#66a61e"]


def fig_pareto(panels: Sequence[dict]):
    """Pareto plot (App. F figure): true validity vs mean repair rounds per policy, with 95 % CIs. Each policy
    keeps one colour and marker in every panel (one legend below); markers shrink in the legend's order, so
    policies that land on the same point stay visible one inside the other. TPM is hollow."""
    names: list[str] = []
    for panel in panels:
        names += [r["policy"] for r in panel["rows"] if r["policy"] != "Hindsight best" and r["policy"] not in names]
    style = {name: (PARETO_COLORS[i % len(PARETO_COLORS)], PARETO_MARKERS[i % len(PARETO_MARKERS)], 7.5 - 0.35 * i)
             for i, name in enumerate(names)}
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(TEXT_WIDTH, 3.3), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        rows = {r["policy"]: r for r in panel["rows"]}
        for name in names:
            if name not in rows:
                continue
            r, (color, marker, size) = rows[name], style[name]
            ax.errorbar(r["mean_K"], r["V"], yerr=[[r["V"] - r["V_low"]], [r["V_high"] - r["V"]]], fmt=marker,
                        ms=size, capsize=1.5, lw=0.6, color=color,
                        mfc="none" if name == "TPM reference" else color, mec=color, label=name)
        ax.set_title(panel["title"])
        ax.set_xlabel("mean repair rounds $\\langle K\\rangle$")
        ax.set_ylim(0, 1.05)
        ax.set_xlim(-0.4, 5.4)
    axes[0][0].set_ylabel("true validity $V$")
    handles = [plt.Line2D([], [], ls="", marker=style[n][1], color=style[n][0], ms=5,
                          mfc="none" if n == "TPM reference" else style[n][0]) for n in names]
    fig.legend(handles, names, loc="lower center", ncol=5, frameon=False, fontsize=6)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig


def fig_loop_dynamics(panels: Sequence[dict]):
    """Loop dynamics (Fig. loop-dynamics): per panel, validity per round of a non-stationary run
    (repeated repair of one candidate) against its independent-resampling control under the same
    budget and perturbation schedule. Each panel dict has ``title``, ``q_main``, ``q_control``,
    ``peak_round`` (K* of ``vrr.stats.trajectory_shape``, None where the data resolve no interior peak)
    and optionally ``perturbed`` (per round: under the prompt mismatch, shaded) and ``p_main_vs_round0`` (exact
    McNemar p of each repaired round against round 0). K* is marked where there is one; otherwise the panel says
    that none is resolved; a repaired round that differs from round 0 at p < 0.05 (uncorrected) is ringed."""
    fig, axes = _pyplot().subplots(1, len(panels), figsize=(COLUMN_WIDTH * len(panels), 2.3), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels):
        q_main, q_control = np.asarray(panel["q_main"], float), np.asarray(panel["q_control"], float)
        k = np.arange(len(q_main))
        perturbed = np.flatnonzero(panel.get("perturbed") or [False] * len(k))
        if perturbed.size:
            ax.axvspan(perturbed[0] - 0.5, perturbed[-1] + (0.3 if perturbed[-1] == k[-1] else 0.5), color="0.9",
                       zorder=0, label="prompt mismatch")
        line, = ax.plot(k, q_main, "-o", ms=3, label="repeated repair")
        p_round0 = np.asarray(panel.get("p_main_vs_round0") or [np.nan] * len(k), float)
        resolved = p_round0 < 0.05
        if resolved.any():
            ax.plot(k[resolved], q_main[resolved], "o", ms=7, mfc="none", mew=0.8, color=line.get_color(),
                    label="repair vs round 0: p < 0.05")
        ax.plot(np.arange(len(q_control)), q_control, "--s", ms=3, label="independent resampling")
        peak = panel["peak_round"]
        if peak is not None:
            ax.annotate(f"$K^*$={peak}", (peak, q_main[peak]), xytext=(0, 6), textcoords="offset points", ha="center")
        else:
            ax.text(0.98, 0.95, "no interior peak resolved\n(corrected for choosing it)", transform=ax.transAxes,
                    ha="right", va="top", fontsize=6)
        ax.set_title(panel["title"])
        ax.set_xlabel("repair round $k$")
        ax.set_ylim(0, 1)
        ax.set_xticks(k)
    axes[0][0].set_ylabel("true validity")
    legend = {}
    for ax in axes[0]:   # every entry once, wherever it is drawn (a panel may have no ringed round)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    axes[0][0].legend(legend.values(), legend.keys(), frameon=False, loc="lower left", fontsize=6)
    fig.tight_layout()
    return fig
