"""06 writes its figures in a second process (vrr.report.FigureWriter): the same bytes as save_figure in the
kernel, every failure raised by close(), and no process left behind."""
import os

import numpy as np
import pytest

import vrr
from vrr.report.render import _pyplot


def _figures():
    rows = [{"label": f"setting {i}", "Q": list(np.linspace(0.8, 0.4 + 0.1 * i, 6)), "shape": "monotone down",
             "kind": "real" if i % 2 else "simulated"} for i in range(5)]
    return [vrr.report.fig_cross_setting(rows),
            vrr.report.fig_gain_geometry([{"label": "a", "alpha": 0.2, "beta": 0.1},
                                          {"label": "b", "alpha": 0.05, "beta": 0.3}])]


def test_the_second_process_writes_the_bytes_save_figure_writes(tmp_path):
    direct = [vrr.report.save_figure(fig, tmp_path / "direct" / f"f{i}") for i, fig in enumerate(_figures())]
    writer = vrr.report.FigureWriter()
    for i, fig in enumerate(_figures()):
        writer.save(fig, tmp_path / "writer" / f"f{i}")
        assert not _pyplot().fignum_exists(fig.number)   # closed here once queued
    written = writer.close()
    assert [tuple(p.name for p in pair) for pair in written] == [("f0.png", "f0.pdf"), ("f1.png", "f1.pdf")]
    for (png, pdf), (png2, pdf2) in zip(direct, written):
        assert png.read_bytes() == png2.read_bytes() and pdf.read_bytes() == pdf2.read_bytes()
    assert not [p for p in (tmp_path / "writer").iterdir() if ".tmp" in p.name]


def test_a_figure_the_worker_cannot_write_is_raised_by_close_and_the_worker_is_gone(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    writer = vrr.report.FigureWriter()
    writer.save(_figures()[1], tmp_path / "a-file" / "fig")
    pool = writer._pool
    with pytest.raises(OSError):
        writer.close()
    assert all(not p.is_alive() for p in (pool._processes or {}).values())
    assert not (tmp_path / "a-file").is_dir()


def test_the_worker_dies_with_its_parent(tmp_path):
    """A 06 kernel killed by SIGKILL cannot stop its worker: PR_SET_PDEATHSIG does (the worker's parent here is a
    child process that is SIGKILLed once its worker exists; the worker's pid comes back through a file)."""
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "worker.pid"
    script = (
        "import os, sys, time, vrr\n"
        "from vrr.report.render import _pyplot\n"
        "w = vrr.report.FigureWriter()\n"
        "fig = _pyplot().figure()\n"
        "w.save(fig, sys.argv[1])\n"
        "w._pending[0].result()\n"
        "open(sys.argv[2], 'w').write(str(next(iter(w._pool._processes))))\n"
        "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "fig"), str(pid_file)])
    end = time.monotonic() + 600
    while not (pid_file.is_file() and pid_file.read_text()):
        assert proc.poll() is None and time.monotonic() < end
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    while os.path.exists(f"/proc/{worker}") and "Z" not in open(f"/proc/{worker}/stat").read().split()[2]:
        assert time.monotonic() < end, "the figure worker outlived its parent"
        time.sleep(0.1)
