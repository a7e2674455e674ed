"""The /proc readers (exporter/procfs.py), against real processes."""

from __future__ import annotations

import os
import subprocess
import sys

from exporter import procfs


def test_one_variable_of_the_environment_a_process_was_started_with() -> None:
    env = {**os.environ, "GPU_RECLAIMER_KEEP": "4h", "OTHER": "GPU_RECLAIMER_KEEP=no"}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, time; os.environ['GPU_RECLAIMER_KEEP'] = '9h'; print('ready', "
            "flush=True); time.sleep(30)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    # Until exec, /proc/<pid>/environ is still the forked parent's: wait for the child.
    assert child.stdout.readline() == "ready\n"
    try:
        # As exec'd: a later setenv inside the process is not what it was started with,
        # and a value that merely contains the name is not the variable.
        assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER_KEEP") == "4h"
        assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER") is None
        assert procfs.read_environ_value(child.pid, "NOT_SET_HERE") is None
    finally:
        child.kill()
        child.wait()
    assert procfs.read_environ_value(child.pid, "GPU_RECLAIMER_KEEP") is None  # gone


def test_the_process_table_links_parents_and_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        table = procfs.read_process_table()
        assert table[child.pid].ppid == os.getpid()
        assert child.pid in procfs.children_map(table)[os.getpid()]
        cpu = procfs.tree_cpu_seconds(os.getpid(), table, procfs.children_map(table))
        assert cpu is not None and cpu > 0
    finally:
        child.kill()
        child.wait()
