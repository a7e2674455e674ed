"""`gpu-reclaimer agent` and `gpu-reclaimer certs` as an SRE runs them on a node
(actuator/fleet/agent_cli.py): flags over the file, TLS given whole or not at all, the
certificates `certs` makes accepted by `agent --check-config`, and each mistake one line,
exit 2."""

from __future__ import annotations

from pathlib import Path

from tests.support import gpu_reclaimer


def test_the_certificates_certs_makes_are_what_the_agent_needs(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    made = gpu_reclaimer("certs", "init", "--dir", str(pki))
    assert made.returncode == 0, made.stderr
    assert "keep it offline" in made.stdout
    agent = gpu_reclaimer("certs", "agent", "gpu-07", "--dir", str(pki), "--ip", "10.0.0.7")
    assert agent.returncode == 0, agent.stderr
    config = tmp_path / "agent.yml"
    config.write_text(f"node:\n  name: from-the-file\njournal: {tmp_path / 'journal.sqlite'}\n")
    checked = gpu_reclaimer(
        "agent",
        "--config",
        str(config),
        "--node-name",
        "gpu-07",  # a flag wins over the file
        "--tls-cert",
        str(pki / "agent-gpu-07.pem"),
        "--tls-key",
        str(pki / "agent-gpu-07.key"),
        "--client-ca",
        str(pki / "ca.pem"),
        "--check-config",
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == "agent config OK (node gpu-07)\n"


def test_each_mistake_is_one_line(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    assert gpu_reclaimer("certs", "init", "--dir", str(pki)).returncode == 0
    cert = str(pki / "actuator.pem")
    for args, message in (
        (["agent", "--tls-cert", cert, "--check-config"], "go together"),
        (["certs", "init", "--dir", str(pki)], "exists"),  # a CA is never overwritten
        (["certs", "agent", "n1", "--dir", str(pki), "--ip", "10.0.0.300"], "10.0.0.300"),
        (["certs", "agent", "n1", "--dir", str(tmp_path / "none")], "no CA here"),
    ):
        done = gpu_reclaimer(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
