"""The bare package (no extras) in a fresh venv: `gpu-reclaimer exporter --sim-dir` serves
metrics, the simulation runs, and a command that needs an extra says which one. Run by
`make check-bare` (CI runs it after `make test`)."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bare-install-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, str(REPO)], check=True)  # no extras
        cli = str(venv / "bin" / "gpu-reclaimer")
        for library in ("flask", "gunicorn", "psycopg", "kubernetes", "jwt", "ldap3"):
            found = subprocess.run(
                [str(venv / "bin" / "python"), "-c", f"import {library}"], capture_output=True
            )
            if found.returncode == 0:
                print(f"FAILED: the bare install has {library}")
                return 1
        node = Path(tmp) / "node"
        subprocess.run([cli, "sim", "init", str(node), "--gpus", "2"], check=True)
        port = free_port()
        exporter = subprocess.Popen(
            [cli, "exporter", "--sim-dir", str(node), "--listen", f"127.0.0.1:{port}"]
        )
        try:
            text = ""
            for _ in range(100):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
                        text = answer.read().decode()
                    break
                except OSError:
                    time.sleep(0.2)
            if "gpu_info{" not in text:
                print("FAILED: the bare exporter served no GPU metrics")
                return 1
        finally:
            exporter.terminate()
            exporter.wait(timeout=20)
        needs = subprocess.run(
            [cli, "report", "--prometheus", "http://127.0.0.1:1", "--since", "1h"],
            capture_output=True,
            text=True,
        )
        if needs.returncode != 2 or "extra" not in needs.stderr or "Traceback" in needs.stderr:
            print(f"FAILED: `report` without its extra: {needs.stderr[-500:]}")
            return 1
        print(f"bare install: the exporter serves; `report` says: {needs.stderr.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
