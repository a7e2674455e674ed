"""`make compose-test`: docker-compose.yml really run, as an SRE runs it, in a container engine.

Podman (Debian's, as root) serves the Docker API that Compose speaks. Images that cannot be
pulled here are built locally and labelled as stand-ins (deploy/standins/): a Debian base
made by mmdebstrap, Python, Prometheus and Alertmanager from Debian's packages. They are
tagged under the project's own name (localhost/gpu-reclaimer-standin/...), never with the
upstream names, and the run's override points the services at them: a later plain
`docker compose up` can never pick a stand-in up unknowingly. The project's own image is
built from ./Dockerfile by Compose on the stand-in Python (its PYTHON_IMAGE argument).
Every image the run built is removed at the end (`--keep-images` keeps them for another
look); the images under upstream names are the same after the run as before it. Grafana
has no Debian package: it is left out.

A simulated node (the one stand-in for hardware) runs real workloads on the host as an
unprivileged user: one idle, one busy. From outside, as an SRE would, it checks that the
exporter's /metrics lists the host's processes (and reads the busy one's socket in the
host's network namespace), Prometheus scrapes it by service name and
loads the shipped rules, Alertmanager routes to the actuator, the containerised actuator
warns the idle process's owner and reclaims it (a real signal from a container to a host
process), the busy one is left alone, and `down` leaves nothing behind. The shipped rules
hold an alert for 5 minutes, evaluated every 45 s (6.5 to 7.5 minutes from idle to the
actuator's webhook): the run takes about 8 to 9 minutes (451 s on a 2-core machine, images
built from scratch, when the rules were evaluated every 15 s), most of it waiting.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STANDINS = REPO / "deploy" / "standins"
BASE = "localhost/gpu-reclaimer-standin/debian:bookworm"
STANDIN = "localhost/gpu-reclaimer-standin"
IMAGES = {  # Containerfile -> its stand-in, under the project's own name
    "python": f"{STANDIN}/python:3.11-slim",
    "prometheus": f"{STANDIN}/prometheus:2.42-debian",
    "alertmanager": f"{STANDIN}/alertmanager:0.25-debian",
}
OWN_IMAGE = "localhost/gpu-reclaimer-compose-test/gpu-reclaimer:0.1.0"
# What docker-compose.yml and ./Dockerfile name: never created or changed by the run.
UPSTREAM = ("python:3.11-slim", "prom/prometheus:v2.53.0", "prom/alertmanager:v0.27.0")
SERVICES = ["prometheus", "alertmanager", "exporter", "actuator"]  # Grafana: no Debian package
PROJECT = "gpu-reclaimer-compose-test"
NODE = "gpu-node-1"  # docker-compose.yml's default GPU_RECLAIMER_NODE
WORKLOAD_USER = "nobody"  # an unprivileged owner: root and system accounts are protected
RECLAIM_WITHIN_S = 720.0  # worst case 445 s to the webhook, then a 15 s grace and the exit


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(*argv: str, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(argv)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def limits() -> list[str]:
    """The containers' limits within this machine's own: podman's default open-files limit
    is above the hard limit here, and a hard process limit above what the kernel lets the
    engine set makes every container fail to start."""
    import resource

    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    procs = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    return [f"nofile={files}:{files}", f"nproc={procs}:{procs}"]


def build_standins(work: Path) -> None:
    """The base from Debian's packages, then each stand-in image on it (a minute or so)."""
    ulimits = [arg for limit in limits() for arg in ("--ulimit", limit)]
    base = work / "base.tar"
    log("stand-in base: mmdebstrap bookworm (minbase)")
    run("mmdebstrap", "--quiet", "--variant=minbase", "bookworm", str(base))
    run("podman", "import", "--message", "LOCAL STAND-IN: Debian bookworm base", str(base), BASE)
    context = work / "standins"
    shutil.copytree(STANDINS, context)
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", context / "ca-certificates.crt")
    for name, tag in IMAGES.items():
        log(f"stand-in image {tag} ({name}.Containerfile)")
        run(
            "podman",
            "build",
            *ulimits,
            "-f",
            str(context / f"{name}.Containerfile"),
            "-t",
            tag,
            str(context),
        )


@contextmanager
def docker_api(work: Path) -> Iterator[dict[str, str]]:
    """Podman's Docker API on a socket of the run's own; the environment Compose needs."""
    conf = work / "containers.conf"
    conf.write_text(
        "[containers]\ndefault_ulimits = [" + ", ".join(f'"{x}"' for x in limits()) + "]\n"
    )
    sock = work / "podman.sock"
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        yield {**env, "DOCKER_HOST": f"unix://{sock}", "COMPOSE_PROJECT_NAME": PROJECT}
    finally:
        service.terminate()
        service.wait(timeout=30)


@contextmanager
def notice_sink() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """The owner's webhook, on the host: what the containerised actuator told."""
    received: list[dict[str, Any]] = []

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append(json.loads(body or b"{}"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()


def project_tree(work: Path) -> Path:
    """The tracked files, as a user's checkout has them, and the secrets `make secrets`
    writes: the run never touches this checkout's deploy/secrets/."""
    tree = work / "gpu-reclaimer"
    files = run("git", "-C", str(REPO), "ls-files", "-z").split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    run("make", "-C", str(tree), "secrets", "PYTHON=" + sys.executable)
    return tree


def override(work: Path, tree: Path, sim: Path, sink_port: int) -> Path:
    """What the run changes for a machine without GPUs: the stand-in images, the simulated
    node for the exporter and the actuator, and an actuator that enforces (15 s grace) and
    warns through a webhook on the host. Everything else is the shipped stack."""
    config = (REPO / "deploy" / "actuator.yml").read_text()
    config = config.replace("mode: observe", "mode: enforce", 1)
    config = config.replace("  grace: 10m ", "  grace: 15s ", 1)
    config = config.replace("  min_runtime: 10m ", "  min_runtime: 0s  ", 1)  # fresh workloads
    config = config.replace(
        "  webhook: null\n",
        f"  webhook: {{url: 'http://host.containers.internal:{sink_port}/notices'}}\n",
        1,
    )
    (work / "actuator.yml").write_text(config)
    sim_mount = f"{sim}:/var/lib/gpu-reclaimer-sim"
    own = {  # the project's image, on the stand-in Python, under the run's own name
        "build": {"context": str(tree), "args": {"PYTHON_IMAGE": IMAGES["python"]}},
        "image": OWN_IMAGE,
    }
    services = {
        "prometheus": {"image": IMAGES["prometheus"]},
        "alertmanager": {"image": IMAGES["alertmanager"]},
        "exporter": own
        | {
            "environment": {"GPU_RECLAIMER_SIM_DIR": "/var/lib/gpu-reclaimer-sim"},
            "volumes": [sim_mount],
        },
        "actuator": own
        | {
            "environment": {"GPU_RECLAIMER_SIM_DIR": "/var/lib/gpu-reclaimer-sim"},
            "volumes": [sim_mount, f"{work / 'actuator.yml'}:/etc/gpu-reclaimer/actuator.yml:ro"],
        },
    }
    path = work / "override.yml"
    path.write_text(json.dumps({"services": services}, indent=2))  # JSON is YAML
    return path


@contextmanager
def workloads(sim: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """One idle and one busy job, each writing to its own log: a stdout shared with this
    script would be written by others, and a write is activity (the idle job's too)."""
    cli = [sys.executable, "-m", "exporter.cli", "sim", "run", "--dir", str(sim)]
    out = {name: (sim.parent / f"{name}.log").open("wb") for name in ("idle", "busy")}
    programs = {
        "idle": ["--gpu", "0", "--memory", "4GiB", "--phases", "load=5s,idle"],
        # The busy one also serves on a loopback port: its socket, in the host's network
        # namespace, is read from inside the exporter's container (setns, SYS_ADMIN).
        "busy": [
            *("--gpu", "1", "--memory", "6GiB", "--phases", "busy", "--util", "80"),
            *("--serve", "0"),
        ],
    }
    started = {
        name: subprocess.Popen(
            [*cli, *program, "--user", WORKLOAD_USER, "--name", f"{name}-train"],
            cwd=REPO,
            start_new_session=True,
            stdout=out[name],
            stderr=subprocess.STDOUT,
        )
        for name, program in programs.items()
    }
    try:
        yield started
    finally:
        for process in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for file in out.values():
            file.close()


def get(url: str, token: str | None = None) -> Any:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body[:1] in (b"{", b"[") else body.decode()


def wait_for(what: str, check: Callable[[], Any], within: float) -> Any:
    deadline = time.monotonic() + within
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
            if found:
                return found
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(2)
    raise SystemExit(f"FAILED: {what} within {within:g}s" + (f" ({last})" if last else ""))


def check_stack(
    token: str, started: dict[str, subprocess.Popen[bytes]], told: list[dict[str, Any]]
) -> None:
    idle, busy = started["idle"].pid, started["busy"].pid

    def listed() -> bool:
        metrics = get("http://127.0.0.1:9838/metrics")
        return f'pid="{idle}"' in metrics and f'pid="{busy}"' in metrics

    wait_for("the exporter's /metrics listing the host's processes", listed, 90)
    log(f"exporter: /metrics lists host PIDs {idle} (idle) and {busy} (busy)")

    def sockets_read() -> bool:
        metrics = get("http://127.0.0.1:9838/metrics")
        if "gpu_exporter_process_network_unknown{" in metrics:
            raise SystemExit("FAILED: the exporter cannot read a host process's sockets")
        return any(
            line.startswith("gpu_process_listening_sockets{")
            and f'pid="{busy}"' in line
            and 'scope="loopback"' in line
            and float(line.rsplit(" ", 1)[1]) == 1
            for line in metrics.splitlines()
        )

    wait_for("the exporter reading the busy process's listening socket", sockets_read, 60)
    log("exporter: reads the host process's socket in the host's network namespace")

    def scraped() -> list[str]:
        targets = get("http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
        up = {t["scrapeUrl"] for t in targets if t["health"] == "up"}
        wanted = {"http://exporter:9838/metrics", "http://actuator:9836/metrics"}
        return sorted(up) if wanted <= up else []

    log(f"prometheus: scrapes by service name: {wait_for('the scrapes', scraped, 120)}")
    groups = get("http://127.0.0.1:9090/api/v1/rules")["data"]["groups"]
    names = {rule["name"] for group in groups for rule in group["rules"]}
    if not {"GpuProcessIdle", "gpu_process:idle_condition"} <= names:
        raise SystemExit(f"FAILED: the shipped rules are not loaded: {sorted(names)}")
    log(f"prometheus: {len(groups)} rule groups, {len(names)} rules loaded")

    def reclaimed() -> dict[str, Any] | None:
        cases = get(f"http://127.0.0.1:9836/api/v1/cases?pid={idle}", token)["cases"]
        return next((c for c in cases if c["state"] in ("reclaimed", "failed")), None)

    log("waiting for the idle process to be flagged (the rules hold 5 min), warned, reclaimed")
    case = wait_for("the idle process reclaimed", reclaimed, RECLAIM_WITHIN_S)
    if case["state"] != "reclaimed":
        raise SystemExit(f"FAILED: case {case['id']} ended {case['state']}: {case['reason']}")
    if started["idle"].wait(timeout=30) is None:
        raise SystemExit("FAILED: the idle process still runs")
    log(f"actuator: case {case['id']} reclaimed PID {idle} (a host process, from a container)")
    if not any(str(idle) in json.dumps(notice) for notice in told):
        raise SystemExit("FAILED: the owner's webhook was never told")
    log(f"owner: {len(told)} notice(s) reached the webhook on the host")
    if started["busy"].poll() is not None:
        raise SystemExit("FAILED: the busy process was stopped")
    busy_cases = get(f"http://127.0.0.1:9836/api/v1/cases?pid={busy}", token)["cases"]
    if busy_cases:
        raise SystemExit(f"FAILED: the busy process has cases: {busy_cases}")
    log("busy process: alive, no case")


def diagnose(compose: list[str], env: dict[str, str]) -> str:
    """What a failed run shows an SRE: the services' states and their last log lines."""
    parts = [subprocess.run([*compose, "ps"], capture_output=True, text=True, env=env).stdout]
    for service in SERVICES:
        logs = subprocess.run(
            [*compose, "logs", "--tail=15", "--no-color", service],
            capture_output=True,
            text=True,
            env=env,
        )
        parts.append(logs.stdout + logs.stderr)
    return "\n".join(parts)


def leftovers(env: dict[str, str]) -> list[str]:
    found = []
    for kind in ("ps -a", "volume ls", "network ls"):
        out = run(
            "podman",
            *kind.split(),
            "--format",
            "{{.Names}}" if kind == "ps -a" else "{{.Name}}",
            env=env,
        )
        found += [f"{kind.split()[0]}: {name}" for name in out.split() if PROJECT in name]
    return found


def image_ids(names: Iterable[str]) -> dict[str, str]:
    """The image ID each name points to now ("" where there is none)."""
    ids = {}
    for name in names:
        found = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Id}}", name],
            capture_output=True,
            text=True,
            check=False,
        )
        ids[name] = found.stdout.strip() if found.returncode == 0 else ""
    return ids


def remove_images(keep: bool) -> None:
    built = [OWN_IMAGE, *IMAGES.values(), BASE]
    if keep:
        log(f"--keep-images: kept {', '.join(built)}")
        return
    for name in built:  # the project's first: it is built on the stand-in Python
        subprocess.run(["podman", "rmi", "--force", name], capture_output=True, check=False)
    left = [name for name, image in image_ids(built).items() if image]
    if left:
        raise SystemExit(f"FAILED: images of the run are left: {left}")
    log("removed the images the run built (--keep-images keeps them)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="checks/compose_stack.py",
        description="Run docker-compose.yml for real in podman on stand-in images and check "
        "that it reclaims an idle host process and leaves a busy one alone (make compose-test).",
    )
    parser.add_argument(
        "--keep-images",
        action="store_true",
        help="keep the stand-in images and the project's image the run built "
        "(make compose-test KEEP_IMAGES=1); by default they are removed at the end",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("compose-test runs containers as root (Debian's podman): run it as root")
        return 2
    missing = [t for t in ("podman", "mmdebstrap", "docker-compose") if not shutil.which(t)]
    if missing:
        print(f"compose-test needs {', '.join(missing)} (make compose-deps installs them)")
        return 2
    # A CI timeout or ^C still brings the stack down (the `finally` blocks run).
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, lambda signum, _frame: sys.exit(128 + signum))
    began = time.monotonic()
    upstream_before = image_ids(UPSTREAM)
    try:
        run_stack()
    finally:
        remove_images(args.keep_images)
    after = image_ids(UPSTREAM)
    changed = [name for name in UPSTREAM if after[name] != upstream_before[name]]
    if changed:
        raise SystemExit(f"FAILED: the run changed images under upstream names: {changed}")
    log(f"compose-test passed in {time.monotonic() - began:.0f} s")
    return 0


def run_stack() -> None:
    with tempfile.TemporaryDirectory(prefix="compose-test-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # the workloads' user reaches the simulated node inside it
        build_standins(work)
        tree = project_tree(work)
        token = (tree / "deploy" / "secrets" / "actuator-token").read_text().strip()
        sim = work / "sim"
        run(sys.executable, "-m", "exporter.cli", "sim", "init", str(sim), "--gpus", "2")
        (sim / "procs").chmod(0o1777)  # the workloads register as their own user
        for shared in ("/run/gpu-reclaimer/heartbeats", "/run/gpu-reclaimer/self"):
            Path(shared).mkdir(parents=True, exist_ok=True)
        with docker_api(work) as env, notice_sink() as (port, told):
            compose = [
                "docker-compose",
                "--project-directory",
                str(tree),
                "-f",
                str(tree / "docker-compose.yml"),
                "-f",
                str(override(work, tree, sim, port)),
            ]
            log("docker-compose build (the project's image from ./Dockerfile)")
            run(*compose, "build", "actuator", env=env)
            try:
                log(
                    f"docker-compose up -d {' '.join(SERVICES)} (Grafana left out: no Debian "
                    "package to stand in for it)"
                )
                run(*compose, "up", "-d", *SERVICES, env=env)
                with workloads(sim) as started:
                    try:
                        check_stack(token, started, told)
                    except SystemExit:
                        print(diagnose(compose, env), flush=True)
                        raise
            finally:
                run(*compose, "down", "--volumes", "--remove-orphans", env=env)
            left = leftovers(env)
            if left:
                raise SystemExit(f"FAILED: `down` left {left}")
            log("down: no container, volume or network of the run is left")


if __name__ == "__main__":
    sys.exit(main())
