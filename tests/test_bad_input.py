"""Every command over a corpus of user mistakes: bad durations, missing paths, URLs without
a scheme, broken YAML, wrong types, unreachable services. Each is exit status 2 and a
message naming the problem, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import REPO

DOWN = "http://127.0.0.1:1"  # nothing listens: connection refused at once


def _corpus(tmp: Path) -> list[tuple[list[str], str]]:
    broken = tmp / "broken.yml"
    broken.write_text("groups: [\n")
    wrong = tmp / "wrong.yml"
    wrong.write_text("server: {workers: many}\n")
    exporter_wrong = tmp / "exporter.yml"
    exporter_wrong.write_text("gzip_level: high\n")
    bad_for = tmp / "rules.yml"
    bad_for.write_text(
        "groups:\n- name: x\n  rules:\n  - {alert: A, expr: vector(1), for: bogus}\n"
    )
    missing = str(tmp / "missing")
    return [
        # durations, in Prometheus' grammar (1w, 1y are valid: the service is what fails)
        (["report", "--prometheus", DOWN, "--since", "5parsecs"], "not a time"),
        (["report", "--prometheus", DOWN, "--since", "1w"], "cannot reach Prometheus"),
        (
            ["backtest", "--prometheus", DOWN, "--since", "1d", "--for", "1y"],
            "cannot reach Prometheus",
        ),
        (
            ["backtest", "--prometheus", DOWN, "--since", "1d", "--for", "1fortnight"],
            "invalid duration",
        ),
        (["keep", "1", "--for", "forever"], "invalid duration"),
        (["exporter", "--nvml-timeout", "soon"], "invalid duration"),
        (["demo", "--grace", "soon"], "invalid duration"),
        # paths
        (["exporter", "--sim-dir", missing], "sim init"),
        (["sim", "status", missing], "sim init"),
        (
            ["sim", "run", "--dir", missing, "--gpu", "0", "--memory", "1GiB", "--phases", "busy"],
            "sim init",
        ),
        (["actuator", "--config", missing], "cannot read"),
        (["agent", "--config", missing], "cannot read"),
        (["backtest", "--prometheus", DOWN, "--since", "1h", "--rules", missing], "cannot read"),
        (["certs", "agent", "n1", "--dir", missing], "no CA here"),
        (["keep", "1", "--for", "1h", "--socket", missing], "no keep socket"),
        (["wait", "--gpus", "1", "--socket", missing], "no socket at"),
        (["why", "1", "--token-file", missing], "cannot read the token file"),
        # URLs without a scheme
        (["report", "--prometheus", "127.0.0.1:9090", "--since", "1h"], "not an http(s) URL"),
        (["backtest", "--prometheus", "prometheus", "--since", "1h"], "not an http(s) URL"),
        (["why", "1", "--actuator", "actuator:9836"], "not an http(s) URL"),
        # broken YAML
        (["exporter", "--config", str(broken)], "not valid YAML at line 2"),
        (["actuator", "--config", str(broken)], "not valid YAML at line 2"),
        (["agent", "--config", str(broken)], "not valid YAML at line 2"),
        (
            ["backtest", "--prometheus", DOWN, "--since", "1h", "--rules", str(broken)],
            "not valid YAML at line 2",
        ),
        (
            ["backtest", "--prometheus", DOWN, "--since", "1h", "--rules", str(bad_for)],
            "for: not a Prometheus duration",
        ),
        # wrong types
        (["actuator", "--config", str(wrong)], "server.workers"),
        (["exporter", "--config", str(exporter_wrong)], "gzip_level"),
        (["sim", "init", str(tmp / "node"), "--gpus", "two"], "two"),
        (["keep", "abc", "--for", "1h"], "not a whole number"),
        (["wait", "--gpus", "two"], "not a whole number"),
        (["why", "case-one"], "not a whole number"),
        (
            ["report", "--prometheus", DOWN, "--since", "1h", "--price-per-kwh", "-1"],
            "must not be negative",
        ),
        (["wait", "--memory", "lots"], "--memory"),
        (
            ["report", "--prometheus", DOWN, "--since", "1h", "--price-per-kwh", "nan"],
            "must not be negative (nor nan or inf)",
        ),
        (["report", "--prometheus", DOWN, "--since", "1h", "--grid-carbon", "-5"], "--grid-carbon"),
        (["wait", "--gpus", "1", "--for", "a while"], "invalid duration"),
        (["--log-level", "chatty", "exporter"], "--log-level"),
        # unreachable services
        (["report", "--prometheus", DOWN, "--since", "1h"], "Connection refused"),
        (["backtest", "--prometheus", DOWN, "--since", "1h"], "Connection refused"),
        (["why", "1", "--actuator", DOWN], "cannot reach the actuator"),
        (["tune", "--prometheus", DOWN, "--since", "1d"], "cannot reach Prometheus"),
        (["tune", "--prometheus", DOWN, "--since", "1d", "--util", "5"], "from 0 to 1"),
        (["tune", "--prometheus", DOWN, "--since", "1d", "--for", "soon"], "invalid duration"),
    ]


def test_every_command_answers_a_mistake_with_exit_2_and_the_problem(tmp_path: Path) -> None:
    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "exporter.cli", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    corpus = _corpus(tmp_path)
    with ThreadPoolExecutor(4) as pool:  # each case is its own process: no shared state
        answers = list(pool.map(run, [argv for argv, _ in corpus]))
    failures = []
    for (argv, expected), done in zip(corpus, answers, strict=True):
        problems = []
        if done.returncode != 2:
            problems.append(f"exit {done.returncode}")
        if "Traceback" in done.stderr:
            problems.append("a traceback")
        if expected not in done.stderr:
            problems.append(f"no {expected!r}")
        if problems:
            failures.append(f"{' '.join(argv)}: {', '.join(problems)}\n{done.stderr[-600:]}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize(
    "text,seconds", [("1w", 604800.0), ("1y", 31536000.0), ("1h30m", 5400.0), ("250ms", 0.25)]
)
def test_durations_read_prometheus_grammar(text: str, seconds: float) -> None:
    from exporter.units import parse_duration

    assert parse_duration(text) == seconds
