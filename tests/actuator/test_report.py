"""`gpu-reclaimer report` against a real Prometheus holding known data: four hours of
series written as OpenMetrics, backfilled with `promtool tsdb create-blocks-from
openmetrics`, and figures checked exactly."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from actuator.tools.report import Figures, Price, Usage, summary_rows
from tests.helpers.prom import Server, backfilled_prometheus
from tests.support import gpu_reclaimer_command

GiB = 1024**3
EXPORTER = 'instance="n1:9838",job="gpu-exporter"'
ACTUATOR = 'instance="act:9836",job="gpu-reclaimer-actuator"'
# Samples 7 s off the minute: no sample sits on a 60 s step boundary.
OFFSET = 7


def _series(name: str, labels: str, value, start: int, end: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        f"{name}{{{labels}}} {value(t) if callable(value) else value} {t}"
        for t in range(start + OFFSET, end, 15)
    ]


def _history(s: int) -> str:
    """Before: [s - 2h, s); this period: [s, s + 2h)."""
    before, start, end = s - 7200, s, s + 7200
    gpu = [f'{EXPORTER},gpu="{i}",uuid="GPU-{i}"' for i in (0, 1)]
    info = {
        100: ("0", "alice", "vision"),
        200: ("1", "bob", "nlp"),
        201: ("1", "bob", "nlp"),
        300: ("0", "carol", "speech"),
        400: ("1", "dave", "serving"),  # a service, quiet for half an hour
    }
    families: dict[str, list[str]] = {
        "gpu_info": [],
        "gpu_utilization_ratio": [],
        "gpu_process_info": [],
        "gpu_process:idle_condition": [],
        "gpu_process:stalled_condition": [],
        "gpu_process:idle_power_watts": [],
        "gpu_process:service_idle_condition": _series(
            "gpu_process:service_idle_condition",
            f'{EXPORTER},gpu="1",uuid="GPU-1",pid="400"',
            6 * GiB,
            start + 3600,
            start + 5400,
        ),
        "gpu_released_success_total": [],
        "gpu_memory_freed_bytes_total": [],
    }
    for i, labels in enumerate(gpu):
        families["gpu_info"] += _series(
            "gpu_info", f'{labels},name="H100",driver_version="550",node="n1"', 1, before, end
        )
        util = (0.8, 0.2)[i]
        families["gpu_utilization_ratio"] += _series(
            "gpu_utilization_ratio",
            labels,
            lambda t, u=util: 0.1 if t < start else u,
            before,
            end,
        )
    for pid, (g, user, project) in info.items():
        labels = f'{EXPORTER},gpu="{g}",uuid="GPU-{g}",pid="{pid}"'
        families["gpu_process_info"] += _series(
            "gpu_process_info",
            f'{labels},node="n1",user="{user}",project="{project}",command="python"',
            1,
            before,
            end,
        )
    idle = [  # pid, memory, from, to
        (100, 4 * GiB, start, start + 3600),
        (200, 2 * GiB, start + 1800, start + 3600),
        (201, 1 * GiB, start + 1800, start + 3600),  # hung: stalled, counted as idle is
        (300, 8 * GiB, before, start),
    ]
    watts = {100: 120.0, 200: 80.0, 201: 40.0, 300: 90.0}  # its share of its GPU's draw
    for pid, memory, a, b in idle:
        g = info[pid][0]
        condition = "gpu_process:stalled_condition" if pid == 201 else "gpu_process:idle_condition"
        families[condition] += _series(
            condition,
            f'{EXPORTER},gpu="{g}",uuid="GPU-{g}",pid="{pid}"',
            memory,
            a,
            b,
        )
        families["gpu_process:idle_power_watts"] += _series(
            "gpu_process:idle_power_watts",
            f'{EXPORTER},gpu="{g}",uuid="GPU-{g}",pid="{pid}"',
            watts[pid],
            a,
            b,
        )
    families["gpu_released_success_total"] += _series(
        "gpu_released_success_total",
        ACTUATOR,
        lambda t: 0 if t < start + 3600 else 1,
        before,
        end,
    )
    families["gpu_memory_freed_bytes_total"] += _series(
        "gpu_memory_freed_bytes_total",
        ACTUATOR,
        lambda t: 0 if t < start + 3600 else 4 * GiB,
        before,
        end,
    )
    lines = []
    for name, samples in families.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        family = name.removesuffix("_total") if kind == "counter" else name
        lines.append(f"# TYPE {family} {kind}")
        lines += samples
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    work = tmp_path_factory.mktemp("report")
    start = (int(time.time()) // 3600 - 24) * 3600  # a day ago, on the hour
    with backfilled_prometheus(work, _history(start)) as prom:
        yield prom, start


def report(prom: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*gpu_reclaimer_command(), "report", "--prometheus", prom.url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


def test_figures_are_exact(backfilled: tuple[Server, int]) -> None:
    prom, start = backfilled
    done = report(
        prom,
        "--since",
        _iso(start),
        "--until",
        _iso(start + 7200),
        "--format",
        "json",
        "--price-per-gpu-hour",
        "10",
        "--currency",
        "CNY",
        "--price-per-kwh",
        "0.8",
        "--grid-carbon",
        "500",
    )
    assert done.returncode == 0, done.stderr
    assert "querying" in done.stderr  # progress
    got = json.loads(done.stdout)
    assert got["gpus"] == 2 and got["gpu_hours"] == 4.0
    assert got["avg_utilisation"] == pytest.approx(0.5)
    assert got["idle_gpu_hours"] == 1.5  # GPU 0 for 1 h, GPU 1 for 0.5 h (two processes)
    assert got["idle_process_hours"] == 2.0
    assert got["idle_memory_gib_hours"] == 5.5  # 4 GiB x 1 h + (2 + 1) GiB x 0.5 h
    assert got["idle_cost"] == 15.0 and got["currency"] == "CNY"
    # 120 W x 1 h + (80 + 40) W x 0.5 h = 0.18 kWh; at 0.8 a kWh, 0.144
    assert got["idle_kwh"] == pytest.approx(0.18)
    assert got["idle_energy_cost"] == pytest.approx(0.144)
    assert got["idle_co2e_kg"] == pytest.approx(0.09)  # at 500 g CO2e a kWh
    assert got["reclaims"] == 1  # exact (issue 60: never "1.02 reclaims")
    assert got["freed_gib"] == 4
    groups = {(g["by"], g["name"]): g for g in got["groups"]}
    assert groups[("user", "alice")]["idle_gpu_hours"] == 1.0
    assert groups[("user", "bob")]["idle_gpu_hours"] == 0.5
    assert groups[("user", "bob")]["idle_process_hours"] == 1.0
    assert groups[("user", "bob")]["idle_memory_gib_hours"] == 1.5
    assert groups[("project", "vision")]["cost"] == 10.0
    assert groups[("user", "bob")]["idle_kwh"] == pytest.approx(0.06)
    assert groups[("user", "bob")]["energy_cost"] == pytest.approx(0.048)
    assert groups[("user", "bob")]["co2e_kg"] == pytest.approx(0.03)
    assert groups[("node", "n1")]["idle_gpu_hours"] == 1.5
    assert ("user", "carol") not in groups  # idle only before the period
    # A quiet service is not idle time: its owner sees the GPU-hours it held serving nothing.
    assert got["idle_service_gpu_hours"] == 0.5
    assert groups[("user", "dave")]["idle_service_gpu_hours"] == 0.5
    assert groups[("user", "dave")]["idle_gpu_hours"] == 0
    assert groups[("project", "serving")]["idle_service_gpu_hours"] == 0.5


def test_compare_to_the_period_before(backfilled: tuple[Server, int]) -> None:
    prom, start = backfilled
    done = report(
        prom,
        "--since",
        _iso(start),
        "--until",
        _iso(start + 7200),
        "--compare-to",
        "2h",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    before = got["compare_to"]
    assert before["idle_gpu_hours"] == 2.0 and before["idle_memory_gib_hours"] == 16.0
    assert before["avg_utilisation"] == pytest.approx(0.1)
    assert before["reclaims"] == 0
    assert [g["name"] for g in before["groups"] if g["by"] == "user"] == ["carol"]
    table = report(
        prom,
        "--since",
        _iso(start),
        "--until",
        _iso(start + 7200),
        "--compare-to",
        "2h",
        "--format",
        "markdown",
    )
    assert "| idle GPU-hours | 1.50 | 2.00 | -25 % |" in table.stdout, table.stdout


def test_clear_errors(backfilled: tuple[Server, int]) -> None:
    prom, start = backfilled
    empty = report(prom, "--since", _iso(start - 86400 * 3), "--until", _iso(start - 86400 * 2))
    assert empty.returncode == 2 and "no GPU data between" in empty.stderr
    down = subprocess.run(
        [*gpu_reclaimer_command(), "report", "--prometheus", "http://127.0.0.1:9", "--since", "1h"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 2 and "cannot reach Prometheus" in down.stderr
    assert "Traceback" not in down.stderr + empty.stderr
    backwards = report(prom, "--since", _iso(start + 10), "--until", _iso(start))
    assert backwards.returncode == 2 and "--since must be before --until" in backwards.stderr
    bad = report(prom, "--since", "last tuesday")
    assert bad.returncode == 2 and "not a time" in bad.stderr


def test_table_and_csv(backfilled: tuple[Server, int]) -> None:
    prom, start = backfilled
    period = ("--since", _iso(start), "--until", _iso(start + 7200))
    table = report(prom, *period, "--price-per-gpu-hour", "10", "--currency", "CNY")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert any(line.split() == ["idle", "GPU-hours", "1.50"] for line in lines), table.stdout
    assert any(line.split()[:3] == ["user", "alice", "1.00"] for line in lines), table.stdout
    assert "cost of idle GPU time (CNY)  15.00" in table.stdout
    rows = report(prom, *period, "--format", "csv").stdout.splitlines()
    assert rows[0] == (
        "by,name,idle_process_hours,idle_gpu_hours,idle_memory_gib_hours,idle_kwh,"
        "idle_service_gpu_hours,cost,energy_cost,co2e_kg"
    )
    assert "user,alice,1.0,1.0,4.0,0.12,0.0,,," in rows
    assert "user,dave,0.0,0.0,0.0,0.0,0.5,,," in rows
    assert any(
        line.split()[-1:] == ["0.50"] and "idle service GPU-hours" in line for line in lines
    ), table.stdout
    carbon = report(prom, *period, "--price-per-kwh", "0.8", "--grid-carbon", "500")
    assert "emissions of idle energy  0.09 kg CO2e" in carbon.stdout, carbon.stdout
    alice = next(line.split() for line in carbon.stdout.splitlines() if "alice" in line)
    assert alice[-2:] == ["0.10", "0.06"]  # 0.12 kWh: its energy cost and kg CO2e


def test_a_period_longer_than_the_data_is_computed_over_the_data_and_says_so(
    backfilled: tuple[Server, int],
) -> None:
    """30 days asked, four hours held: the GPU-hours are the four hours', not 30 days'; a
    comparison period with no data leaves the current period printed."""
    prom, _ = backfilled
    done = report(prom, "--since", "30d", "--format", "json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["asked"] is not None and got["asked"]["end"] - got["asked"]["start"] >= 29 * 86400
    assert got["gpu_hours"] == pytest.approx(8.0, abs=0.2)  # 2 GPUs x 4 h, not x 720 h
    table = report(prom, "--since", "30d", "--compare-to", "60d")
    assert table.returncode == 0, table.stderr
    assert "the data covers only this part of the period asked" in table.stdout
    assert "no comparison: no GPU data" in table.stderr
    # No line is padded to the longest cell (the period's): a terminal's width is not wasted.
    assert all(line == line.rstrip() for line in table.stdout.splitlines())


def test_a_period_shorter_than_one_step_is_reported_over_one_step(
    backfilled: tuple[Server, int],
) -> None:
    """30 s asked (or a new exporter whose data covers less than a step): the figures are
    one 60 s step's, and the period asked is said; not a query Prometheus refuses."""
    prom, start = backfilled
    done = report(
        prom, "--since", _iso(start + 3600), "--until", _iso(start + 3630), "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["end"] - got["start"] == got["step_seconds"] == 60
    assert got["asked"] == {"start": start + 3600, "end": start + 3630}
    assert got["gpus"] == 2 and got["gpu_hours"] == pytest.approx(2 / 60, abs=1e-3)


def test_the_period_s_gpu_hours_are_never_printed_below_its_idle_gpu_hours() -> None:
    """Two GPUs for 72 s, one of them idle throughout: 0.04 GPU-hours in all, 0.02 idle; at
    one decimal the total read 0.0 beside an idle 0.02."""
    idle = Usage(idle_gpu_hours=0.02, idle_process_hours=0.02)
    rows = dict(summary_rows(Figures(0.0, 72.0, 12.0, 2, 0.5, idle), Price()))
    assert float(rows["GPU-hours in the period"]) >= float(rows["idle GPU-hours"])
    assert rows["GPU-hours in the period"] == "0.04"
    assert rows["period"].endswith("(1m12s)")  # not "(0.0 h)"


def test_the_fleet_previews_idle_bars_agree_with_the_report(backfilled: tuple[Server, int]) -> None:
    """The same run, the same figures: the fleet dashboard's idle bars (as its preview runs
    and draws them) against `report`. Bob's two idle processes on one GPU for half an hour are
    0.5 GPU-hours in both (the bars once counted process-hours under a GPU-hours title)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from prometheus_api_client import PrometheusConnect

    from tests.helpers.previews import previews_module

    prom, start = backfilled
    got = json.loads(
        report(
            prom, "--since", _iso(start), "--until", _iso(start + 7200), "--format", "json"
        ).stdout
    )
    said = {(g["by"], g["name"]): g for g in got["groups"]}
    previews = previews_module()
    dashboard = json.loads(
        (previews.DASHBOARDS / "gpu-reclaimer-fleet.json").read_text(encoding="utf-8")
    )
    panels = {p["title"]: p for p in dashboard["panels"]}
    titles = ("Idle GPU-hours by user", "Idle memory by project (GiB-hours)")
    queries = previews.run_queries(
        PrometheusConnect(prom.url), dashboard, titles, start, start + 7200, 15
    )
    step_hours = previews.panel_interval({}, 7200, 15, 1.0) / 3600  # the panels' interval
    for title, by, figure in (
        (titles[0], "user", "idle_gpu_hours"),
        (titles[1], "project", "idle_memory_gib_hours"),
    ):
        (query,) = [q for q in queries if q.panel == title]
        bars = {r["metric"][by]: float(r["value"][1]) for r in query.result}
        expected = {name: g[figure] for (kind, name), g in said.items() if kind == by}
        # Within one panel interval: the subquery's first step may sit on the period's start
        # (carol, idle until then, gets that one step), where the report's steps end after it.
        per_step = step_hours * (8 if figure == "idle_memory_gib_hours" else 1)
        for name in set(bars) | set(expected):
            assert abs(bars.get(name, 0.0) - expected.get(name, 0.0)) <= per_step + 1e-9, (
                title,
                name,
                bars,
                expected,
            )
        # And the picture shows those values, on the same clock.
        drawing, ax = plt.subplots()
        previews.draw(ax, panels[title], [query])
        assert sorted(round(b.get_width(), 6) for b in ax.patches) == sorted(
            round(v, 6) for v in bars.values()
        )
        plt.close(drawing)
    assert said[("user", "bob")]["idle_gpu_hours"] == 0.5


def test_a_finer_step_counts_idle_time_more_finely(backfilled: tuple[Server, int]) -> None:
    """Bob's processes are idle from 30 minutes in to the hour. Over the 1,600 s from
    2,000 s in, each step counts whole: within one step of the truth, and a 15 s step is
    closer than a 10-minute one. A step under 1 s is taken as 1 s (never a query
    Prometheus refuses)."""
    prom, start = backfilled
    truth = 1600 / 3600
    errors = {}
    for step, seconds in (("10m", 600), ("15s", 15)):
        done = report(
            prom,
            "--since",
            _iso(start + 2000),
            "--until",
            _iso(start + 3600),
            "--step",
            step,
            "--format",
            "json",
        )
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["step_seconds"] == seconds
        bob = {(g["by"], g["name"]): g for g in got["groups"]}[("user", "bob")]
        errors[step] = abs(bob["idle_gpu_hours"] - truth)
        assert errors[step] <= seconds / 3600 + 1e-9, (step, bob["idle_gpu_hours"], truth)
    assert errors["15s"] < errors["10m"]
    tiny = report(prom, "--since", _iso(start), "--until", _iso(start + 60), "--step", "0.1s")
    assert tiny.returncode == 0, tiny.stderr
