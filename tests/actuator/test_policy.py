"""Config and policy: strict validation, errors naming the file and the rule, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuator.config import ConfigError, load_config
from actuator.policy import Claims, Facts, Mode, Policy, ReclaimWhen, resolve
from actuator.startup import read_token
from exporter.units import parse_duration, parse_size
from tests.support import REPO

DEPLOY = REPO / "deploy" / "actuator.yml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(text)
    return path


def test_shipped_reference_config_is_inert_and_protective():
    config = load_config(DEPLOY)
    assert config.mode == Mode.OBSERVE
    assert config.protect.protect_root and config.protect.protected_uid_below == 1000
    assert config.defaults.term_timeout == 10.0
    assert config.server.max_body == 2**20 and config.server.workers == 2


def test_defaults_when_empty(tmp_path):
    config = load_config(write(tmp_path, ""))
    assert config.mode == Mode.OBSERVE
    assert config.defaults.term_timeout == 10.0  # the 10 s default of DESIGN §4
    assert config.protect.protect_root


def test_unknown_key_is_an_error_naming_file_and_rule(tmp_path):
    path = write(
        tmp_path,
        "projects:\n  - {name: a, match: {users: [x]}}\n  - {name: b, match: {users: [y]}, "
        "grase: 5m}\n",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message and "projects #2 (b).grase" in message and "grase" in message


def test_bad_values_are_errors(tmp_path):
    for text in (
        "mode: yolo\n",
        "defaults: {grace: soon}\n",
        "protect: {commands: []}\n",
        "protect: {commands: ['(unclosed']}\n",
        "projects: [{name: empty, match: {}}]\n",
        "- a list\n",
        "server: {max_body: lots}\n",
    ):
        with pytest.raises(ConfigError):
            load_config(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yml")


def test_project_resolution_first_match_wins():
    policy = Policy.model_validate(
        {
            "mode": "enforce",
            "projects": [
                {"name": "vip", "match": {"groups": ["vip"]}, "protected": True},
                {"name": "lab", "match": {"labels": ["lab"], "users": ["bob"]}, "grace": "1h"},
            ],
        }
    )
    e = resolve(policy, Facts(user="bob", groups=("users",)))
    assert e.rule == "projects #2 (lab)" and e.grace == 3600 and e.term_timeout == 10
    e = resolve(policy, Facts(user="bob", groups=("vip",)), Claims(project="lab"))
    assert e.protected and e.rule.startswith("projects #1 (vip)")
    e = resolve(policy, Facts(user="carol"))
    assert e.rule == "defaults" and e.mode == Mode.ENFORCE


def test_token_sources(tmp_path, monkeypatch):
    config = load_config(write(tmp_path, ""))
    monkeypatch.delenv("GPU_RECLAIMER_TOKEN", raising=False)
    with pytest.raises(ConfigError):
        read_token(config)
    monkeypatch.setenv("GPU_RECLAIMER_TOKEN", "from-env-0123456789")
    assert read_token(config) == "from-env-0123456789"
    token = tmp_path / "token"
    token.write_text("from-file-0123456789\n")
    token.chmod(0o600)
    assert read_token(config, str(token)) == "from-file-0123456789"


@pytest.mark.reliability(41)
def test_unsafe_tokens_are_refused(tmp_path, monkeypatch):
    config = load_config(write(tmp_path, ""))
    token = tmp_path / "token"
    token.write_text("long-enough-but-readable\n")
    token.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by group or others"):
        read_token(config, str(token))
    token.chmod(0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_token(config, str(token))
    token.write_text("short\n")
    token.chmod(0o600)
    with pytest.raises(ConfigError, match="at least 16"):
        read_token(config, str(token))
    monkeypatch.setenv("GPU_RECLAIMER_TOKEN", "x")
    with pytest.raises(ConfigError, match="at least 16"):
        read_token(config)


@pytest.mark.reliability(41)
@pytest.mark.parametrize(
    "text, message",
    [
        ("protect: {extra_commands: ['$^']}\n", "protects nothing"),
        ("protect: {extra_commands: ['']}\n", "is empty"),
        ("protect: {commands: ['vllm']}\n", "add yours with extra_commands"),
        (
            "mode: enforce\nnotice: {required: false}\ndefaults: {grace: 0s, term_timeout: 0s}\n",
            "SIGKILL at the notice",
        ),
        ("mode: enforce\n", "enforce mode needs a way to warn the owner"),
        ("projects: [{name: p, match: {users: [a]}, mode: enforce}]\n", "needs a way to warn"),
        ("idle: {start_time_tolerance: 1e9}\n", "start_time_tolerance"),
    ],
)
def test_dangerous_config_is_refused(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_replacing_the_protected_commands_is_explicit_and_warned(tmp_path):
    from actuator.config import config_warnings

    text = "protect: {commands: ['vllm'], replace_default_commands: true}\n"
    config = load_config(write(tmp_path, text))
    assert config.protect.effective_commands == ("vllm",)
    assert any("replaces the built-in" in w for w in config_warnings(config))
    extended = load_config(write(tmp_path, "protect: {extra_commands: ['vllm']}\n"))
    assert "vllm" in extended.protect.effective_commands
    assert "tensorboard(\\..*)?" in extended.protect.effective_commands


def test_units():
    assert parse_duration("1h30m") == 5400 and parse_duration("250ms") == 0.25
    assert parse_duration(3) == 3.0 and parse_duration("2.5") == 2.5
    assert parse_size("1MiB") == 2**20 and parse_size("2GB") == 2 * 10**9
    for bad in ("", "5 minutes", "-1s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_a_node_pool_rule_applies_by_the_node_and_pools_have_their_own_limits() -> None:
    from actuator.policy import Limits

    policy = Policy.model_validate(
        {
            "mode": "observe",
            "projects": [
                {"name": "dgx", "match": {"nodes": ["dgx-*"]}, "mode": "enforce", "grace": "2m"}
            ],
            "limits": {
                "terminations_per_node_per_hour": 10,
                "pools": [{"nodes": ["dgx-*"], "terminations_per_node_per_hour": 2}],
            },
        }
    )
    on_pool = resolve(policy, Facts(user="alice", node="dgx-07"))
    assert (on_pool.mode, on_pool.grace, on_pool.rule) == ("enforce", 120.0, "projects #1 (dgx)")
    assert resolve(policy, Facts(user="alice", node="a100-01")).mode == "observe"
    assert resolve(policy, Facts(user="alice")).mode == "observe"  # node not confirmed live
    assert policy.limits.per_node_hour("dgx-07") == 2
    assert policy.limits.per_node_hour("a100-01") == 10
    assert Limits().per_node_hour("x") == 10


def test_a_rule_matches_a_slurm_jobs_partition_or_account_as_the_scheduler_says():
    policy = Policy.model_validate(
        {
            "projects": [
                {"name": "long", "match": {"partitions": ["long"]}, "grace": "1h"},
                {"name": "course", "match": {"accounts": ["cs101"]}, "protected": True},
            ]
        }
    )
    assert resolve(policy, Facts(partition="long")).grace == 3600.0
    assert resolve(policy, Facts(partition="debug", account="cs101")).protected
    # Not a job (or Slurm unknown): no partition, no account, the defaults.
    assert resolve(policy, Facts()).rule == "defaults"
    with pytest.raises(ValueError, match="partition, account or label"):
        Policy.model_validate({"projects": [{"name": "x", "match": {}}]})


@pytest.mark.reliability(52)
def test_reclaim_when_per_rule_and_claims_only_move_it_to_demand(tmp_path: Path):
    config = load_config(
        write(
            tmp_path,
            (
                "defaults: {reclaim_when: demand}\n"
                "projects:\n"
                "  - {name: teaching, match: {groups: [students]}, reclaim_when: idle}\n"
                "  - {name: claimed, match: {labels: [research]}, reclaim_when: demand}\n"
                "  - {name: hurried, match: {labels: [sprint]}, reclaim_when: idle}\n"
            ),
        )
    )
    assert resolve(config, Facts(user="bob")).reclaim_when == "demand"
    # A label (anyone can set one) that matches an idle rule never takes demand away.
    assert resolve(config, Facts(user="bob"), Claims(project="sprint")).reclaim_when == "demand"
    teaching = resolve(config, Facts(user="ann", groups=("students",)))
    assert teaching.reclaim_when == "idle"
    # A label that matches a demand rule makes the students' case safer: demand.
    claimed = resolve(config, Facts(user="ann", groups=("students",)), Claims(project="research"))
    assert claimed.reclaim_when == "demand"


def test_min_runtime_per_rule_and_claims_only_lengthen_it(tmp_path: Path):
    config = load_config(
        write(
            tmp_path,
            (
                "defaults: {min_runtime: 10m}\n"
                "projects:\n"
                "  - {name: compile-heavy, match: {groups: [jax]}, min_runtime: 1h}\n"
                "  - {name: quick, match: {groups: [students]}, min_runtime: 0s}\n"
                "  - {name: claimed, match: {labels: [research]}, min_runtime: 2h}\n"
            ),
        )
    )
    assert resolve(config, Facts(user="bob")).min_runtime == 600
    assert resolve(config, Facts(user="ann", groups=("jax",))).min_runtime == 3600
    assert resolve(config, Facts(user="ann", groups=("students",))).min_runtime == 0
    # A label matching a longer rule lengthens it; it can never shorten one.
    claimed = Facts(user="ann", groups=("students",))
    assert resolve(config, claimed, Claims(project="research")).min_runtime == 7200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("demand: {slurm: true}\n", "configure slurm"),
        ("demand: {kubernetes: true}\n", "configure kubernetes"),
        ("demand: {pools: [{pool: a, nodes: [n], query: up}]}\n", "pools need prometheus"),
        ("demand: {wait_list: true}\n", "server.keep_socket"),
        ("demand: {pools: [{pool: 'a b', nodes: [n], query: up}]}\nprometheus: x\n", "pool"),
        ("server: {keep_socket: /" + "x" * 120 + "}\n", "at most 107 bytes"),
        # Read as unknown demand at every pass, for ever, had they been let through:
        ("demand: {prometheus: 'prometheus:9090', pools: []}\n", "demand.prometheus"),
        (
            "demand: {prometheus: 'http://p:9090',\n"
            "         pools: [{pool: a, nodes: [n], query: 'sum(x'}]}\n",
            "not PromQL",
        ),
        ("defaults: {reclaim_when: sometimes}\n", "reclaim_when"),
    ],
)
def test_demand_settings_that_cannot_work_are_refused(tmp_path: Path, text: str, expected: str):
    with pytest.raises(ConfigError, match=expected):
        load_config(write(tmp_path, text))


def test_demand_mode_without_a_source_is_warned(tmp_path: Path):
    from actuator.config import config_warnings

    config = load_config(write(tmp_path, "defaults: {reclaim_when: demand}\n"))
    assert any("no demand source is configured" in w for w in config_warnings(config))


def test_a_service_is_reclaimed_only_on_demand_after_its_window() -> None:
    """Services idle between bursts of requests (issue 48): a tree listening where other
    hosts can reach it, or on a port the rule names, gets the service class."""
    policy = Policy.model_validate(
        {
            "defaults": {"service_ports": [8888]},
            "projects": [
                {"name": "serving", "match": {"users": ["sam"]}, "service_window": "2h"},
                {"name": "eager", "match": {"users": ["eve"]}, "service_reclaim_when": "idle"},
            ],
        }
    )
    job = resolve(policy, Facts(user="alice"))
    assert not job.service and job.reclaim_when == ReclaimWhen.IDLE and job.idle_for == 0
    # Five loopback listeners (a Jupyter kernel) do not make a service.
    kernel = resolve(policy, Facts(user="alice", listen_ports=(40001, 40002, 40003)))
    assert not kernel.service
    service = resolve(policy, Facts(user="alice", listens_external=True))
    assert service.service and service.reclaim_when == ReclaimWhen.DEMAND
    assert service.idle_for == 3600
    named = resolve(policy, Facts(user="alice", listen_ports=(8888,)))
    assert named.service and named.reclaim_when == ReclaimWhen.DEMAND
    assert resolve(policy, Facts(user="sam", listens_external=True)).idle_for == 7200
    eager = resolve(policy, Facts(user="eve", listens_external=True))
    assert eager.service and eager.reclaim_when == ReclaimWhen.IDLE
    # The alert's class can only make a rule safer: never idle where the rule says demand.
    claimed = resolve(policy, Facts(user="alice"), Claims(service=True))
    assert claimed.service and claimed.reclaim_when == ReclaimWhen.DEMAND
    demand_rule = Policy.model_validate(
        {"defaults": {"reclaim_when": "demand", "service_reclaim_when": "idle"}}
    )
    assert resolve(demand_rule, Facts(listens_external=True)).reclaim_when == ReclaimWhen.DEMAND


def test_service_ports_are_ports(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="less than or equal to 65535"):
        Policy.model_validate({"defaults": {"service_ports": [70000]}})


@pytest.mark.reliability(67)
def test_service_evidence_is_named() -> None:
    """A service is something that serves (issue 57): the node's evidence, named in the
    rule's text; a listener no client reached in a whole service window leaves a job."""
    policy = Policy.model_validate({"defaults": {"service_ports": [8888]}})
    hour = 3600.0

    def rule(**facts: object) -> str:
        eff = resolve(policy, Facts(user="alice", **facts))  # type: ignore[arg-type]
        return eff.rule if eff.service else ""

    assert "named in service_ports" in rule(listen_ports=(8888,), watched_for=2 * hour)
    assert "2 client connection(s) open on port 8000" in rule(
        listens_external=True, listen_ports=(8000,), clients=2, watched_for=2 * hour
    )
    assert "a client on port 8000 12m ago" in rule(
        listens_external=True, listen_ports=(8000,), client_ago=720.0, watched_for=2 * hour
    )
    unproven = rule(listens_external=True, listen_ports=(8000,), watched_for=1200.0)
    assert "watched for 20m of the 1h" in unproven, unproven
    assert "not watched" in rule(listens_external=True, listen_ports=(8000,))
    # Watched for the whole window, no client ever, or the last one too long ago: a job.
    assert rule(listens_external=True, listen_ports=(6006,), watched_for=hour) == ""
    assert rule(listens_external=True, client_ago=hour + 1, watched_for=2 * hour) == ""
    # Only the job's own rendezvous listeners (no serving listener): a job at once.
    assert rule(listen_ports=(29500, 41234), watched_for=1.0) == ""


@pytest.mark.reliability(67)
def test_a_stalled_alert_is_never_softened_where_the_node_sees_a_hang() -> None:
    """An NCCL hang spins at 100 % util: its rank's listeners never make it a service."""
    policy = Policy()
    hung = Facts(user="alice", listens_external=True, clients=1, busy=True)
    eff = resolve(policy, hung, Claims(stalled=True))
    assert not eff.service and eff.reclaim_when == ReclaimWhen.IDLE and eff.idle_for == 0


@pytest.mark.reliability(67)
def test_a_stalled_alert_for_a_quiet_service_keeps_the_service_class() -> None:
    """The alert's name alone never takes a service's class away: the node must see the
    hang's signature (SM busy) for that."""
    quiet = Facts(user="alice", listens_external=True, clients=1, busy=False)
    eff = resolve(Policy(), quiet, Claims(stalled=True))
    assert eff.service and eff.reclaim_when == ReclaimWhen.DEMAND


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "notifier: {directory: d.yml, wecom: {url: 'qyapi.weixin.qq.com/cgi-bin/webhook'}}\n",
            "notifier.wecom.url: expected a http:// or https:// URL with a host",
        ),
        ("notifier: {webhook: {url: 'not a url'}}\n", "notifier.webhook.url"),
        ("notifier: {public_url: 'reclaimer.example'}\n", "notifier.public_url"),
        ("alertmanager: {urls: ['am:9093']}\n", "alertmanager.urls #1"),
        ("alertmanager: {urls: ['http://am:9093'], runbook_url: 'wiki/runbook'}\n", "runbook_url"),
        (
            "notifier: {ldap: {url: 'http://ldap', base: 'dc=x'}}\n",
            "expected a ldap:// or ldaps:// URL",
        ),
    ],
)
def test_urls_that_can_never_work_are_refused_when_the_config_loads(
    tmp_path: Path, text: str, expected: str
) -> None:
    """Issue 60: an owner notice's URL without a scheme was accepted in enforce mode and
    failed at every notice; every URL is now checked when the config loads, in words."""
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "mode: enforce\n" + text))
    assert expected in str(caught.value)
    assert "Value error" not in str(caught.value) and "pattern" not in str(caught.value)
