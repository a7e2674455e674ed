"""Rescale the alert rules' time windows, so demos and end-to-end tests run the *same* rules
faster instead of keeping a second, hand-edited copy of every expression.

`render_rules(src, dest, scale)` rewrites every duration in `*.rules.yml`: PromQL range
selectors (`[1m]`), subquery ranges and steps (`[5m:30s]`), `offset`, and the rules' `for:` /
`keep_firing_for:` and group `interval:`. Windows are kept at >= 2 evaluation intervals so a
rendered rule still sees at least two evaluations of data. Thresholds on values (ratios,
bytes, sample counts) are untouched: scale the scrape and evaluation intervals by the same
factor (15 s x scale) so each window still holds the same number of samples.

`render_deploy(...)` lays out a runnable copy of `deploy/` + rendered `alert-rules/` with the
targets and intervals substituted, keeping the relative layout the reference configs expect.
Alertmanager's timings (`group_wait`, `group_interval`, `repeat_interval`, `resolve_timeout`)
are scaled too, so "alert fires -> actuator hears it" shrinks with the rules.

Depends only on PyYAML; no I/O beyond the files it is asked to read and write.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from actuator.promql_duration import (
    DURATION,
    format_promql_duration,
    parse_promql_duration,
)

__all__ = [
    "format_promql_duration",
    "parse_promql_duration",
    "render_deploy",
    "render_rules",
    "scale_alertmanager_timings",
    "scale_expr",
]

_DURATION = DURATION
# `[range]`, `[range:step]`, `[range:]`; label values are skipped before this runs.
_RANGE_RE = re.compile(rf"\[\s*({_DURATION})\s*(?::\s*({_DURATION})?\s*)?\]")
_OFFSET_RE = re.compile(rf"\b(offset\s+)(-?)({_DURATION})\b")
# String literals and comments, which may contain text that looks like a duration.
_SKIP_RE = re.compile(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|`[^`]*`|#[^\n]*")

# The evaluation interval of deploy/prometheus.yml, which the source rules are written for.
REFERENCE_EVAL_INTERVAL_S = 15.0


def _scaled(text: str, scale: float, floor_s: float = 0.0) -> str:
    return format_promql_duration(max(parse_promql_duration(text) * scale, floor_s))


def scale_expr(expr: str, scale: float, min_window_s: float) -> str:
    """Rescale the range selectors, subquery steps and offsets in a PromQL expression."""

    def rescale_range(match: re.Match[str]) -> str:
        window = _scaled(match.group(1), scale, min_window_s)
        if ":" not in match.group(0):
            return f"[{window}]"
        step = match.group(2)
        # An empty step means "the evaluation interval" and scales with it by itself.
        return f"[{window}:{_scaled(step, scale, 0.001) if step else ''}]"

    def rescale_offset(match: re.Match[str]) -> str:
        return f"{match.group(1)}{match.group(2)}{_scaled(match.group(3), scale)}"

    def rescale_code(code: str) -> str:
        return _OFFSET_RE.sub(rescale_offset, _RANGE_RE.sub(rescale_range, code))

    out: list[str] = []
    pos = 0
    for skipped in _SKIP_RE.finditer(expr):
        out.append(rescale_code(expr[pos : skipped.start()]))
        out.append(skipped.group(0))
        pos = skipped.end()
    out.append(rescale_code(expr[pos:]))
    return "".join(out)


def _scale_rule_file(
    data: Any, scale: float, min_window_s: float, origin: Path, runbook_base: str | None = None
) -> Any:
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise ValueError(f"{origin}: not a Prometheus rule file (no 'groups' list)")
    for group in data["groups"]:
        for rule in group.get("rules", []):
            link = rule.get("annotations", {}).get("runbook_url")
            if runbook_base and link:  # the same anchor, on this run's runbook page
                rule["annotations"]["runbook_url"] = f"{runbook_base}#{link.partition('#')[2]}"
        if "interval" in group:
            group["interval"] = _scaled(str(group["interval"]), scale, 0.001)
        for rule in group.get("rules", []):
            rule["expr"] = scale_expr(str(rule["expr"]), scale, min_window_s)
            for key in ("for", "keep_firing_for"):
                # `for: 0s` means "fire at once"; only non-zero holds get the floor.
                if key in rule and parse_promql_duration(str(rule[key])) > 0:
                    rule[key] = _scaled(str(rule[key]), scale, min_window_s)
    return data


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as `|` blocks, so rendered files stay readable."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_presenter)


def render_rules(
    source_dir: Path,
    dest_dir: Path,
    scale: float,
    *,
    eval_interval_s: float | None = None,
    runbook_base: str | None = None,
) -> list[Path]:
    """Write every `source_dir/*.rules.yml` to `dest_dir` with all durations times `scale`.

    `eval_interval_s` is the evaluation interval the rendered rules will run at (default:
    15 s x scale); windows are kept at >= 2 of them. Returns the written paths, sorted.
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    interval = REFERENCE_EVAL_INTERVAL_S * scale if eval_interval_s is None else eval_interval_s
    if not interval > 0:
        raise ValueError(f"eval_interval_s must be > 0, got {interval}")
    sources = sorted(Path(source_dir).glob("*.rules.yml"))
    if not sources:
        raise FileNotFoundError(f"no *.rules.yml in {source_dir}")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for source in sources:
        data = _scale_rule_file(
            yaml.safe_load(source.read_text()), scale, 2 * interval, source, runbook_base
        )
        target = dest / source.name
        header = (
            f"# Generated by actuator/demo/ruleset.py from {source.name}, durations x {scale:g}, "
            f"windows >= {format_promql_duration(2 * interval)}. Do not edit: edit the source.\n"
        )
        body = yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, width=100)
        target.write_text(header + body)
        written.append(target)
    return written


# Alertmanager durations that delay or repeat a notification; scaled with the rules.
_AM_TIMING_RE = re.compile(
    rf"^(?P<key>\s*(?:group_wait|group_interval|repeat_interval|resolve_timeout):\s*)"
    rf"(?P<value>{_DURATION})(?P<rest>\s*(?:#.*)?)$",
    re.MULTILINE,
)


def scale_alertmanager_timings(text: str, scale: float, floor_s: float = 0.0) -> str:
    """Rescale Alertmanager's timing keys in a config's text, keeping its comments.

    Every value is kept at >= `floor_s` (the evaluation interval: waiting less than one
    evaluation for more alerts of a group gains nothing).
    """

    def rescale(match: re.Match[str]) -> str:
        value = _scaled(match.group("value"), scale, floor_s)
        return f"{match.group('key')}{value}{match.group('rest')}"

    return _AM_TIMING_RE.sub(rescale, text)


def _write_targets(path: Path, targets: Iterable[str]) -> None:
    path.write_text(yaml.safe_dump([{"targets": list(targets)}], sort_keys=False))


def render_deploy(
    repo_root: Path,
    dest_dir: Path,
    *,
    scale: float = 1.0,
    exporters: Iterable[str] = ("127.0.0.1:9838",),
    actuator: str = "127.0.0.1:9836",
    alertmanagers: Iterable[str] = ("127.0.0.1:9093",),
    chat_url: str | None = None,
    token_file: Path | None = None,
    extra_scrape_configs: Iterable[Mapping[str, Any]] = (),
    runbook_base: str | None = None,
) -> Path:
    """Lay out `dest_dir/deploy/` + `dest_dir/alert-rules/` for one run (demo, tests).

    The reference configs are copied with only these substitutions: scrape/evaluation interval
    (15 s x scale), rules rendered at `scale`, Alertmanager's group_wait / group_interval /
    repeat_interval / resolve_timeout x scale (>= one evaluation interval), file_sd targets,
    the actuator (and optionally chat) webhook host, the credentials file, and (optionally)
    the runbook links' base. Returns the prometheus.yml path.
    """
    repo_root, dest_dir = Path(repo_root), Path(dest_dir)
    interval = REFERENCE_EVAL_INTERVAL_S * scale
    render_rules(
        repo_root / "alert-rules", dest_dir / "alert-rules", scale, runbook_base=runbook_base
    )

    deploy = dest_dir / "deploy"
    (deploy / "targets").mkdir(parents=True, exist_ok=True)
    prom = yaml.safe_load((repo_root / "deploy" / "prometheus.yml").read_text())
    prom["global"]["scrape_interval"] = format_promql_duration(interval)
    prom["global"]["evaluation_interval"] = format_promql_duration(interval)
    # The self-scrape of the reference config points at a fixed port; runs add their own.
    prom["scrape_configs"] = [
        job for job in prom["scrape_configs"] if job["job_name"] != "prometheus"
    ] + [dict(job) for job in extra_scrape_configs]
    (deploy / "prometheus.yml").write_text(yaml.safe_dump(prom, sort_keys=False))
    _write_targets(deploy / "targets" / "gpu-exporter.yml", exporters)
    _write_targets(deploy / "targets" / "actuator.yml", [actuator])
    _write_targets(deploy / "targets" / "alertmanager.yml", alertmanagers)

    am_text = (repo_root / "deploy" / "alertmanager.yml").read_text()
    if scale != 1.0:
        am_text = scale_alertmanager_timings(am_text, scale, floor_s=interval)
    am_text = am_text.replace("http://actuator:9836/", f"http://{actuator}/")
    if chat_url is not None:
        am_text = am_text.replace("http://chat-relay:8080/alertmanager", chat_url)
    if token_file is not None:
        am_text = am_text.replace(
            "credentials_file: secrets/actuator-token", f"credentials_file: {token_file}"
        )
    (deploy / "alertmanager.yml").write_text(am_text)
    return deploy / "prometheus.yml"
