"""Hostile programs through MBPP's label path (``task.label_rounds``): none may be labeled valid.

Each program is a WRONG answer to a real MBPP problem (referred to by split and index) that tries
to be labeled valid anyway: by faking the checker's outcome, reading the hidden tests, escaping the
sandbox, or leaving something behind. Correct answers, including ones that use the allowed imports,
threads and processes, must stay valid. After the battery: no file the programs tried to leave on
the host exists, and no process of theirs survives.
"""
import os
import subprocess
import time
from pathlib import Path

import pytest

from vrr.loop.sandbox import live_sandbox_processes
from vrr.loop.tasks import get_task
from vrr.loop.tasks.mbpp import entry_point

TOKEN = "vrrhostile" + os.urandom(4).hex()
PROBLEM = ("test", 0)  # one sanitized-MBPP problem, by split and index


def _hostile(f: str) -> dict[str, str]:
    """Wrong answers (they return None or a wrong value) that try to pass; ``{f}`` is the tested name."""
    wrong = f"def {f}(*args, **kwargs):\n    return None\n"
    host = f"/tmp/{TOKEN}"
    return {
        "exit0_at_import": "import os\nos._exit(0)\n" + wrong,
        "sys_exit_at_import": "import sys\nsys.exit(0)\n" + wrong,
        "sys_exit_in_call": f"import sys\ndef {f}(*a, **k):\n    sys.exit(0)\n",
        "os_exit_in_call": f"import os\ndef {f}(*a, **k):\n    os._exit(0)\n",
        "keyboard_interrupt": f"def {f}(*a, **k):\n    raise KeyboardInterrupt\n",
        "patch_assertionerror": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n" + wrong,
        "patch_exec_compile": "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None\n" + wrong,
        "patch_sys_exit": "import sys, os\nsys.exit = lambda *a: os._exit(0)\n" + wrong,
        "lying_eq_object": f"class Yes:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
                           f"    def __bool__(self):\n        return True\ndef {f}(*a, **k):\n    return Yes()\n",
        "lying_eq_int": f"class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
                        f"def {f}(*a, **k):\n    return I(-987654)\n",
        "lying_eq_str": f"class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n"
                        f"def {f}(*a, **k):\n    return S('nope')\n",
        "lying_eq_list": f"class L(list):\n    def __eq__(self, o):\n        return True\ndef {f}(*a, **k):\n    return L()\n",
        "lying_eq_tuple_float": f"class T(float):\n    def __eq__(self, o):\n        return True\n"
                                f"    __hash__ = float.__hash__\ndef {f}(*a, **k):\n    return T(-1.5)\n",
        "print_pass_marker": "print('VRR-ALL-TESTS-PASSED')\nprint('OK')\n" + wrong,
        "forged_record_then_exit": "import os\nos.write(1, b'\\nVRR-RECORD {\"status\": {}, \"names\": {}, \"calls\": []}\\n')\n"
                                   "os._exit(0)\n",
        "forged_verdict": "import os\nos.write(1, b'\\nVRR-VERDICT {\"failures\": [\"\"]}\\n')\nos._exit(0)\n",
        "atexit_forgery": "import atexit, os\natexit.register(lambda: os.write(1, b'\\nVRR-VERDICT {\"failures\": [\"\"]}\\n'))\n" + wrong,
        "thread_forgery": "import threading, os, time\ndef w():\n    time.sleep(0.2)\n"
                          "    os.write(1, b'\\nVRR-RECORD {\"status\": {}, \"names\": {}, \"calls\": []}\\n')\n"
                          "threading.Thread(target=w, daemon=True).start()\n" + wrong,
        "read_own_program": f"import re\nsrc = open('/sandbox/main.py').read()\n"
                            f"vals = re.findall(r'== *([^\\\\n]+)', src)\n"
                            f"def {f}(*a, **k):\n    return vals[0] if vals else None\n",
        "read_caller_frames": f"import sys\ndef {f}(*a, **k):\n    fr = sys._getframe(1)\n    seen = []\n"
                              f"    while fr is not None:\n        seen.append(repr(fr.f_locals)[:2000])\n        fr = fr.f_back\n"
                              f"    return seen\n",
        "read_benchmark_files": f"import glob\nfound = glob.glob('/work/**/mbpp*', recursive=True) + "
                                f"glob.glob('/**/sanitized-mbpp.json', recursive=True)\n"
                                f"def {f}(*a, **k):\n    return found\n",
        "read_host_proc": f"import os\ncmds = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
                          f"        try:\n            cmds.append(open('/proc/%s/cmdline' % p).read())\n"
                          f"        except OSError:\n            pass\ndef {f}(*a, **k):\n    return cmds\n",
        "write_tmp": f"open('{host}-tmp', 'w').write('x')\n" + wrong,
        "write_shm": f"open('/dev/shm/{TOKEN}-shm', 'w').write('x')\n" + wrong,
        "write_repo": f"open('{Path(__file__).resolve().parent}/{TOKEN}-repo', 'w').write('x')\n" + wrong,
        "network": "import socket\ns = socket.create_connection(('127.0.0.1', 9), timeout=1)\n" + wrong,
        "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        break\n" + wrong,
        "orphan_sleeper": f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(120)\n    os._exit(0)\n" + wrong,
        "memory_bomb": "b = []\nwhile True:\n    b.append(b'x' * (64 << 20))\n" + wrong,
        "cpu_spin": f"def {f}(*a, **k):\n    while True:\n        pass\n",
        "sleeper": f"import time\ndef {f}(*a, **k):\n    time.sleep(300)\n",
        "huge_output": "import sys\nfor _ in range(100):\n    sys.stdout.write('VRR-RECORD ' + 'x' * (1 << 20))\n" + wrong,
        "deep_recursion_value": f"def {f}(*a, **k):\n    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n",
        "infinite_generator": f"def {f}(*a, **k):\n    while True:\n        yield 1\n",
        "signal_parent": f"import os, signal\nfor p in range(1, 5):\n    try:\n        os.kill(p, signal.SIGKILL)\n"
                         f"    except OSError:\n        pass\n" + wrong,
        "user_namespace": f"import ctypes\nctypes.CDLL(None).unshare(0x10000000)\n" + wrong,
        "hash_order_dependent": f"def {f}(*a, **k):\n    return sorted({{'a', 'b', 'c', 'd', 'e', 'f'}}, key=hash)\n",
        "raises_instead": f"def {f}(*a, **k):\n    raise ValueError('no')\n",
        "stateful_lookup": f"calls = []\ndef {f}(*a, **k):\n    calls.append(a)\n    return len(calls)\n",
    }


@pytest.fixture(scope="module")
def mbpp():
    task = get_task("mbpp")
    problem = task.load(PROBLEM[0])[PROBLEM[1]]
    return task, problem


def _label(task, problem, codes: dict) -> dict:
    names = list(codes)
    rounds = [({"answer": codes[n]}, problem) for n in names]
    return dict(zip(names, task.label_rounds(rounds)))


def test_hostile_battery_gets_no_wrong_verdict_and_leaves_nothing(mbpp):
    task, problem = mbpp
    f = entry_point(problem)
    battery = _hostile(f)
    assert len(battery) >= 30
    t0 = time.monotonic()
    labels = _label(task, problem, battery)
    valid = [name for name, lab in labels.items() if lab]
    print(f"\nhostile battery: {len(battery)} programs, {len(valid)} labeled valid, {time.monotonic() - t0:.1f} s")
    assert valid == []
    left = [p for p in (Path(f"/tmp/{TOKEN}-tmp"), Path(f"/dev/shm/{TOKEN}-shm"),
                        Path(__file__).resolve().parent / f"{TOKEN}-repo") if p.exists()]
    assert left == []
    end = time.monotonic() + 10
    while live_sandbox_processes(made_by=os.getpid()) and time.monotonic() < end:
        time.sleep(0.1)
    assert live_sandbox_processes(made_by=os.getpid()) == []
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert "sleep(120)" not in ps and TOKEN not in ps.replace("pytest", "")


def test_correct_code_stays_valid_with_allowed_imports_threads_and_processes(mbpp):
    task, problem = mbpp
    f = entry_point(problem)
    ref = problem.answer.code
    correct = {
        "reference": ref,
        "reference_with_numpy": "import numpy as np\n_ = np.arange(3).sum()\n" + ref,
        "reference_with_40_threads": "import threading\n" + ref + "\n_ts = [threading.Thread(target=lambda: None) "
                                     "for _ in range(40)]\n[t.start() for t in _ts]\n[t.join() for t in _ts]\n",
        "reference_with_a_child_process": "import subprocess, sys\n" + ref + "\nsubprocess.run([sys.executable, '-c', 'pass'])\n",
        "reference_printing": ref + f"\n_orig = {f}\ndef {f}(*a, **k):\n    print('called')\n    return _orig(*a, **k)\n",
        "reference_with_tmp_files": "open('/tmp/scratch', 'w').write('x')\n" + ref,
        "reference_via_generator_wrapper": ref,
    }
    labels = _label(task, problem, correct)
    assert all(labels.values()), labels


def test_the_checker_never_runs_in_this_process(mbpp, tmp_path):
    task, problem = mbpp
    marker = tmp_path / "ran-in-the-parent"
    code = f"open({str(marker)!r}, 'w').write('x')\n" + problem.answer.code
    assert _label(task, problem, {"c": code}) == {"c": 0}  # cannot write there, so the import fails
    assert not marker.exists()


def test_order_dependent_code_is_valid_only_under_every_seed():
    from vrr.loop.sandbox import ExecutionRule, run_tests

    # returns the first element of a set: right under some hash seeds, wrong under others
    code = "def first(xs):\n    return list(set(xs))[0]\n"
    tests = ["assert first(['pear', 'apple', 'fig', 'kiwi']) == 'pear'"]
    by_seed = [run_tests([(code, "", tests)], rule=ExecutionRule(hash_seeds=(s,)))[0].passed for s in range(8)]
    assert any(by_seed) and not all(by_seed), by_seed
    seeds = tuple(range(8))
    out = run_tests([(code, "", tests)], rule=ExecutionRule(hash_seeds=seeds))[0]
    assert not out.passed and "PYTHONHASHSEED" in out.reason or not by_seed[0]
