"""Every module of the package has a test module of its own (tests/**/test_<name>.py), or is
listed here with the test module that covers it and why. A new module without either fails
this test, not a reader's trust later."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# module -> the test module that covers it (a module tested under another name)
COVERED_ELSEWHERE = {
    "actuator/api/admin.py": "tests/actuator/api/test_blueprints.py",
    "actuator/api/alerts.py": "tests/actuator/api/test_blueprints.py",
    "actuator/api/auth.py": "tests/actuator/api/test_blueprints.py",
    "actuator/api/health.py": "tests/actuator/api/test_blueprints.py",
    "actuator/demand/kube_nodes.py": "tests/actuator/demand/test_kube_pending.py",
    "actuator/decision.py": "tests/actuator/test_decisions.py",  # the value its functions return
    "actuator/runtime.py": "tests/actuator/test_app.py",  # a record of the parts, no logic
    "exporter/netdiag.py": "tests/exporter/test_netactivity.py",
    "exporter/sim/replay.py": "tests/exporter/sim/test_serving.py",
}
# Generated from exporter/kube/podresources.proto (make protos): not written by hand.
GENERATED = {"exporter/kube/podresources_pb2.py", "exporter/kube/podresources_pb2_grpc.py"}


def modules() -> list[str]:
    found = []
    for package in ("actuator", "exporter"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                found.append(str(path.relative_to(REPO)))
    return found


def test_every_module_has_a_test_module() -> None:
    tests = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    untested = [
        module
        for module in modules()
        if module not in COVERED_ELSEWHERE
        and module not in GENERATED
        and f"test_{Path(module).stem}.py" not in tests
        and f"test_{Path(module).parent.name}_{Path(module).stem}.py" not in tests
    ]
    assert untested == [], f"no test module of their own: {untested}"


def test_the_modules_covered_elsewhere_are_really_imported_there() -> None:
    for module, test in COVERED_ELSEWHERE.items():
        dotted = module.removesuffix(".py").replace("/", ".")
        text = (REPO / test).read_text()
        name = dotted.rsplit(".", 1)[1]
        parent = dotted.rsplit(".", 1)[0]
        assert dotted in text or (f"from {parent} import" in text and name in text), (
            f"{test} does not import {dotted}"
        )
    for module in [*COVERED_ELSEWHERE, *GENERATED]:
        assert (REPO / module).exists(), f"{module} is listed here but no longer exists"
