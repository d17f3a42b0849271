"""The sandbox for model-written code (vrr.loop.sandbox: bubblewrap, one cgroup per program).

Each test runs a program that tries to get out, and asserts from the host that it did not: what it
could read, write, reach or leave behind. The machine facts these rest on (bubblewrap installed, a
writable cgroup) are asserted, not assumed.
"""
import inspect
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from vrr.loop import sandbox
from vrr.loop.sandbox import OUTPUT_CAP, SandboxError, _cgroup, live_sandbox_processes, run_many, run_python

REPO = Path(__file__).resolve().parents[1]
# A program that should pass is bounded by CPU time (the default 5 s); its wall limit only guards the test, so a
# busy machine cannot turn it into a timeout. Tests of the wall limit itself use programs that sleep.
WALL, CPU = 600.0, 5.0


def _no_leftovers(wait: float = 600.0) -> bool:
    end = time.monotonic() + wait
    while live_sandbox_processes(made_by=os.getpid()):   # other test workers may run the sandbox meanwhile
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_the_machine_has_the_tool_and_a_cgroup():
    rule, env = sandbox.isolation_rule(allow_weak=False), sandbox.isolation_environment()
    print(f"sandbox: {rule} on {env}")
    assert rule["tool"] == "bubblewrap" and rule["memory_cap"] == "cgroup"
    assert env["tool"].startswith("bubblewrap") and env["cgroup"] in ("v1", "v2") and env["packages"]["numpy"]
    assert env["interpreter"] == os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def test_the_filesystem_is_minimal_and_read_only():
    r = run_python("import os, json\n"
                   "print(json.dumps({'root': sorted(os.listdir('/')), 'uid': os.getuid(), 'cwd': os.getcwd(),\n"
                   "  'proc': sorted(p for p in os.listdir('/proc') if p.isdigit())}))\n", timeout=WALL, cpu_limit=CPU)
    import json
    seen = json.loads(r.stdout)
    assert r.passed, r.error
    assert seen["uid"] == sandbox.SANDBOX_UID and seen["cwd"] == "/tmp"
    for hidden in ("etc", "home", "work", "var", "srv", "mnt"):
        assert hidden not in seen["root"]
    assert len(seen["proc"]) <= 3  # its own PID namespace: bubblewrap's init and the program
    for path in (REPO / "README.md", REPO.parent / "shared" / "data", Path.home()):
        r = run_python(f"print(open({str(path)!r}).read()[:20])\n", timeout=WALL, cpu_limit=CPU)
        assert not r.passed, path
    r = run_python("open('/usr/lib/vrr-written', 'w').write('x')\n", timeout=WALL, cpu_limit=CPU)
    assert not r.passed and not Path("/usr/lib/vrr-written").exists()


def test_host_processes_are_invisible():
    secret = "vrr-secret-" + os.urandom(8).hex()
    helper = subprocess.Popen(["sleep", "60", secret])
    try:
        r = run_python("import os\nfound = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                       "        try:\n            found.append(open('/proc/%s/cmdline' % p, 'rb').read())\n"
                       "        except OSError:\n            pass\n"
                       f"print(any({secret!r}.encode() in c for c in found), len(found))\n", timeout=WALL, cpu_limit=CPU)
        assert r.passed and r.stdout.startswith("False "), r
    finally:
        helper.kill()
        helper.wait()


def test_tmp_and_shm_are_private_and_vanish():
    name = "vrr-sandbox-probe-" + os.urandom(4).hex()
    r = run_python(f"open('/tmp/{name}', 'w').write('x')\nopen('/dev/shm/{name}', 'w').write('x')\nprint('wrote')\n", timeout=WALL, cpu_limit=CPU)
    assert r.passed and r.stdout == "wrote\n"
    assert not Path("/tmp", name).exists() and not Path("/dev/shm", name).exists()
    r = run_python(f"import os\nprint(os.path.exists('/tmp/{name}'))\n", timeout=WALL, cpu_limit=CPU)  # nor in the next sandbox
    assert r.stdout == "False\n"


def test_a_world_writable_host_file_stays_untouched():
    d = Path(tempfile.mkdtemp(prefix="vrr-host-"))
    f = d / "world-writable"
    f.write_text("host")
    os.chmod(d, 0o777)
    os.chmod(f, 0o666)
    try:
        r = run_python(f"open({str(f)!r}, 'w').write('sandbox')\n", timeout=WALL, cpu_limit=CPU)
        assert not r.passed and f.read_text() == "host"
    finally:
        f.unlink()
        d.rmdir()


def test_no_network_even_to_loopback():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))  # only ever a listener this test opens itself
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('CONNECTED')\n")
        assert not r.passed and "CONNECTED" not in r.stdout
    finally:
        listener.close()


def test_memory_is_capped_for_all_processes_together():
    # four processes of 400 MB each (pages touched) exceed the 1 GiB of the run together
    code = ("import os, time\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
            "        b = b'x' * (400 << 20)\n        time.sleep(3)\n        os._exit(0)\n    kids.append(pid)\n"
            "bad = 0\nfor pid in kids:\n    _, st = os.waitpid(pid, 0)\n    bad += st != 0\nprint('killed', bad)\n")
    r = run_python(code, timeout=600)   # the memory cap ends it; the wall limit only guards the test
    assert r.passed and r.stdout.startswith("killed ") and int(r.stdout.split()[1]) >= 1, r
    r = run_python("b = []\nwhile True:\n    b.append(b'x' * (64 << 20))\n", timeout=600)
    assert not r.passed and r.memory_limited and "memory limit" in r.error
    assert _no_leftovers()


def test_fork_bomb_cpu_hog_sleeper_and_setsid_child_leave_nothing():
    r = run_python("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", timeout=3)
    assert not r.passed
    r = run_python("while True:\n    pass\n", timeout=600, cpu_limit=1)   # CPU time: the same on a busy machine
    assert r.cpu_limited and r.error == "cpu time limit of 1 s exceeded" and not r.timed_out
    r = run_python("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\nprint('parent done')\n", timeout=WALL, cpu_limit=CPU)
    assert r.passed and r.stdout == "parent done\n"
    assert _no_leftovers()


def test_no_capabilities_no_new_user_namespace_own_ipc_and_uts_and_the_per_process_limits():
    """The properties a program can only observe from inside: uid 65534 with an empty capability set, no
    further user namespace (``--disable-userns``), IPC and UTS namespaces other than the host's, tmpfs sizes,
    and the per-process limits (open files, core files, file size)."""
    code = (
        "import ctypes, os, resource\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
        "print(os.getuid(), int(status['CapEff'].strip(), 16), int(status['CapBnd'].strip(), 16))\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"          # CLONE_NEWUSER
        "print(os.readlink('/proc/self/ns/ipc'), os.readlink('/proc/self/ns/uts'), os.uname().nodename)\n"
        "print(*(os.statvfs(d).f_blocks * os.statvfs(d).f_frsize for d in ('/tmp', '/dev/shm')))\n"
        "print(*(resource.getrlimit(r)[1] for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_CORE, resource.RLIMIT_FSIZE)))\n")
    r = run_python(code, timeout=WALL, cpu_limit=CPU)
    assert r.passed, r.error
    ids, unshare, namespaces, tmpfs, limits = r.stdout.splitlines()
    assert ids == f"{sandbox.SANDBOX_UID} 0 0"
    assert unshare.split()[0] == "-1" and int(unshare.split()[1]) != 0
    ipc, uts, hostname = namespaces.split()
    assert ipc != os.readlink("/proc/self/ns/ipc") and uts != os.readlink("/proc/self/ns/uts")
    assert hostname == "sandbox"
    assert tmpfs == f"{sandbox.TMPFS_BYTES} {sandbox.TMPFS_BYTES}"
    assert limits == f"{sandbox.OPEN_FILES_LIMIT} 0 {sandbox.FILE_SIZE_LIMIT}"


def test_the_task_cap_stops_a_program_near_its_limit():
    """Processes that stay alive count against the cgroup's pids.max: forking stops below TASK_LIMIT."""
    r = run_python("import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n"
                   "    except OSError as e:\n        print(n, e.errno)\n        break\n"
                   "    if pid == 0:\n        time.sleep(600)\n        os._exit(0)\n    n += 1\n", timeout=600)
    assert r.passed, r.error
    forked, errno_ = map(int, r.stdout.split())
    assert sandbox.TASK_LIMIT // 2 < forked < sandbox.TASK_LIMIT and errno_ == 11   # EAGAIN
    assert _no_leftovers()


def test_threads_within_the_task_limit_are_fine():
    """40 threads at once fit the task limit. The run is bounded by CPU time (5 s, as the default); its wall
    limit only guards the test, so a busy machine (load 10 on 2 cores) does not turn it into a timeout."""
    r = run_python("import threading, time\nts = [threading.Thread(target=time.sleep, args=(0.3,)) for _ in range(40)]\n"
                   "[t.start() for t in ts]\n[t.join() for t in ts]\nprint('ok')\n", timeout=600, cpu_limit=5)
    assert r.passed and r.stdout == "ok\n", r


def test_allowed_imports_and_a_scrubbed_environment(monkeypatch):
    monkeypatch.setenv("VRR_TEST_PARENT_ONLY", "1")
    r = run_python("import os, sys, numpy\nprint(sorted(os.environ))\nprint(sys.flags.no_site, sys.flags.no_user_site)\n", timeout=WALL, cpu_limit=CPU)
    lines = r.stdout.splitlines()
    assert r.passed, r.error
    assert eval(lines[0]) == ["HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONPATH", "TMPDIR"]
    assert lines[1] == "1 1"
    r = run_python("import pytest\n", timeout=WALL, cpu_limit=CPU)  # installed here, not allowed there
    assert not r.passed and "ModuleNotFoundError" in r.error


def test_output_is_capped_and_the_hash_seed_is_a_parameter():
    r = run_python("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(200):\n    sys.stdout.write(chunk)\n", timeout=WALL, cpu_limit=CPU)
    assert not r.passed and len(r.stdout) <= OUTPUT_CAP and r.output_truncated
    code = "print(list({'apple', 'pear', 'plum', 'fig', 'kiwi', 'lime', 'date', 'yuzu'}))"
    same = run_many([code] * 2, hash_seeds=[0, 0], timeout=WALL, cpu_limit=CPU)
    assert same[0].stdout == same[1].stdout
    differ = run_many([code] * 6, hash_seeds=[0, 1, 2, 3, 4, 5], timeout=WALL, cpu_limit=CPU)
    assert len({r.stdout for r in differ}) > 1 and [r.hash_seed for r in differ] == [0, 1, 2, 3, 4, 5]


def test_errors_exit_codes_and_the_default_timeout():
    r = run_python("import sys\nprint('out')\nsys.stderr.write('warn\\n')\nraise ValueError('bad value')\n", timeout=WALL, cpu_limit=CPU)
    assert not r.passed and r.returncode == 1 and r.stdout == "out\n"
    assert r.error == "ValueError: bad value" and "warn" in r.stderr
    r = run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", timeout=WALL, cpu_limit=CPU)
    assert not r.passed and r.error == "killed by SIGSEGV"
    assert inspect.signature(run_python).parameters["timeout"].default == 5.0
    r = run_python("import time\ntime.sleep(600)\n", timeout=2)   # a sleep uses no CPU: only the wall limit ends it
    assert r.timed_out and r.error == "timeout after 2 s" and r.seconds < 600


def test_run_many_keeps_order_and_runs_two_at_a_time():
    codes = [f"import time\ns = time.monotonic()\ntime.sleep(0.5)\nprint({i}, s, time.monotonic())\n" for i in range(6)]
    rs = run_many(codes, parallel=2, progress=True, timeout=600)
    assert all(r.passed for r in rs)
    rows = [r.stdout.split() for r in rs]
    assert [int(row[0]) for row in rows] == list(range(6))
    spans = [(float(row[1]), float(row[2])) for row in rows]
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])
    with pytest.raises(ValueError):
        run_many(codes, parallel=0)


def test_without_bubblewrap_the_sandbox_refuses_and_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxError, match="bubblewrap"):
        run_python("print(1)")


def test_without_a_cgroup_weak_isolation_needs_an_explicit_opt_in(monkeypatch):
    monkeypatch.setattr(_cgroup, "_CGROUPS", None)
    monkeypatch.delenv(sandbox.WEAK_ENV, raising=False)
    with pytest.raises(SandboxError, match="cgroup"):
        run_python("print(1)")
    r = run_python("print(1)", allow_weak=True)
    assert r.passed and r.stdout == "1\n"
    assert sandbox.isolation_rule(allow_weak=True)["memory_cap"] == "per-process limits (explicit opt-in)"
    assert sandbox.isolation_environment()["cgroup"] is None


def test_the_project_process_is_never_the_one_running_the_code(tmp_path):
    marker = tmp_path / "ran-here"
    r = run_python(f"open({str(marker)!r}, 'w').write('x')\n", timeout=WALL, cpu_limit=CPU)
    assert not marker.exists() and not r.passed
    assert signal.getsignal(signal.SIGINT) is not None


BOUNDED_MOUNTS = [("/", sandbox.ROOT_TMPFS_BYTES, True), ("/sandbox", sandbox.PROGRAM_TMPFS_BYTES, True),
                  ("/dev", None, True), ("/tmp", sandbox.TMPFS_BYTES, False), ("/dev/shm", sandbox.TMPFS_BYTES, False)]


@pytest.mark.parametrize("mount, size, read_only", BOUNDED_MOUNTS)
def test_every_writable_mount_has_a_size_of_its_own(mount, size, read_only):
    """The root and /sandbox (bubblewrap's own tmpfs took 270 MiB, bounded only by the memory cgroup) are small
    tmpfs mounts, read-only once mounted, as is /dev; /tmp and /dev/shm stop at TMPFS_BYTES. A program writes
    100 MiB (over TMPFS_BYTES, under MEMORY_LIMIT) in 1 MiB chunks and reports how far it got."""
    code = ("import errno, os\n"
            f"st = os.statvfs({mount!r})\n"
            "print(st.f_blocks * st.f_frsize, bool(st.f_flag & os.ST_RDONLY))\n"
            "done = 0\n"
            "try:\n"
            "    for i in range(100):\n"   # files of 8 MiB each: RLIMIT_FSIZE caps one file at 10 MB
            f"        with open(os.path.join({mount!r}, 'fill%d' % (i // 8)), 'ab') as f:\n"
            "            f.write(b'x' * (1 << 20))\n"
            "        done += 1\n"
            "except OSError as e:\n"
            "    print(done, errno.errorcode[e.errno])\n"
            "else:\n"
            "    print(done, 'written')\n")
    r = run_python(code, timeout=WALL, cpu_limit=CPU)
    assert r.passed, r
    (total, ro), (written, why) = (line.split() for line in r.stdout.splitlines())
    assert ro == str(read_only)
    if size is not None:
        assert int(total) == size
    if read_only:
        assert (written, why) == ("0", "EROFS")
    else:
        assert int(written) <= size >> 20 and why == "ENOSPC", r.stdout
