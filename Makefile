# GPU Reclaimer: the two newcomer commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# What each purpose needs from Debian: the demo only Prometheus and Alertmanager; the tests
# every real part they start on loopback.
DEMO_TOOLS := prometheus promtool prometheus-alertmanager amtool
DEMO_PACKAGES := prometheus prometheus-alertmanager
TEST_TOOLS := $(DEMO_TOOLS) docker-compose slapd openssl chromium chromedriver pg_ctlcluster slurmctld slurmd slurmrestd munged systemd-analyze victoria-metrics
TEST_PACKAGES := $(DEMO_PACKAGES) docker-compose slapd openssl postgresql slurm-wlm slurmrestd munge chromium chromium-driver systemd victoria-metrics

.PHONY: setup demo-setup system-deps demo-deps test-deps secrets test lint unit rules runbook-links demo day bench bench-nvitop soak churn-soak chaos clean protos check-ultralytics check-torch check-bare compose-deps compose-test

# Everything `make test` needs (the Python venv and every Debian package the tests start).
setup: $(VENV)/.installed test-deps
# What `make demo` needs: the Python venv, Prometheus and Alertmanager; nothing else.
demo-setup: $(VENV)/.installed demo-deps

# Re-install when the project's dependencies change.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $@

# Debian packages, installed only when one of their commands is missing. The demo's: Prometheus
# and Alertmanager. The tests' add OpenLDAP (slapd), PostgreSQL, Slurm (slurm-wlm, munge),
# Chromium with its driver, docker-compose (Compose 1 validates docker-compose.yml without
# a Docker engine) and VictoriaMetrics (a long-term store the history commands are tested
# on); the tests start each of them on loopback themselves (PostgreSQL: initdb + pg_ctl;
# Slurm: slurmctld + slurmd with a count-only GPU GRES; VictoriaMetrics fed by Prometheus).
define apt_install
	@missing=""; for t in $(1); do PATH="$$PATH:/usr/sbin" command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing $(2) (missing:$$missing)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(2); \
	fi
endef

demo-deps:
	$(call apt_install,$(DEMO_TOOLS),$(DEMO_PACKAGES))

test-deps:
	$(call apt_install,$(TEST_TOOLS),$(TEST_PACKAGES))

system-deps: test-deps  # the former name

# The kubelet's pod-resources gRPC client (committed; regenerate after editing the .proto).
protos: setup
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \
		exporter/kube/podresources.proto

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python grafana/generate_dashboards.py --check
	$(BIN)/python deploy/kubernetes/generate_prometheusrule.py --check

# The bearer token Alertmanager sends to the actuator (deploy/alertmanager.yml, compose).
secrets: deploy/secrets/actuator-token deploy/secrets/grafana-admin-password
deploy/secrets/actuator-token deploy/secrets/grafana-admin-password:
	mkdir -p deploy/secrets
	umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(32))' > $@
	@# Alertmanager's container runs as nobody (65534) and sends the token: it reads it as
	@# its owner; the actuator (root) refuses a token file group or others can read.
	@if [ "$@" = deploy/secrets/actuator-token ]; then $(SUDO) chown 65534:65534 $@; fi
	@echo "wrote $@ (keep it secret; see docs/deployment.md)"

rules: setup
	promtool check rules alert-rules/*.rules.yml
	cd alert-rules && promtool test rules tests/*.test.yml
	promtool check config deploy/prometheus.yml
	amtool check-config deploy/alertmanager.yml

# Point every alert's runbook_url at your wiki (or where you publish docs/runbook.md):
# make runbook-links RUNBOOK_BASE=https://wiki.example.com/gpu-reclaimer/runbook
runbook-links: setup
	@test -n "$(RUNBOOK_BASE)" || { echo "usage: make runbook-links RUNBOOK_BASE=https://..."; exit 2; }
	$(BIN)/python -m actuator.runbook --base "$(RUNBOOK_BASE)"
	$(BIN)/python deploy/kubernetes/generate_prometheusrule.py

# Two workers (pytest-xdist; each test module whole on one of them, tests/conftest.py):
# 9 to 11 minutes on 2 cores instead of 16. TEST_WORKERS=0 runs one process (to debug).
TEST_WORKERS ?= 2
unit: setup
	$(BIN)/pytest -q --durations=20 -n $(TEST_WORKERS)

test: lint rules unit

demo: demo-setup
	$(BIN)/gpu-reclaimer demo

day: demo-setup  # the measured simulated day: observe, enforce (idle, demand, suspend, presence, both); ~75 min
	$(BIN)/gpu-reclaimer demo --day

bench: setup
	$(BIN)/python benchmarks/exporter_scrape.py
	$(BIN)/python benchmarks/exporter_floor.py
	$(BIN)/python benchmarks/actuator_webhook.py
	$(BIN)/python benchmarks/e2e_latency.py
	$(BIN)/python benchmarks/slow_clients.py
	$(BIN)/python benchmarks/pod_resources.py
	$(BIN)/python benchmarks/fleet_prometheus.py
	$(BIN)/python benchmarks/alert_storm.py
	$(BIN)/python benchmarks/recheck_pass.py
	$(BIN)/python benchmarks/sync_cost.py
	$(BIN)/python benchmarks/actuator_cases.py --no-strace
	$(BIN)/python benchmarks/notice_cost.py
	$(BIN)/python benchmarks/live_cases.py

# Side by side with nvitop-exporter (installed into a throwaway venv from PyPI).
bench-nvitop: setup
	$(BIN)/python benchmarks/exporter_vs_nvitop.py --install --heartbeats --serve

# The bare package (no extras) in a fresh venv: the exporter serves, a command that needs
# an extra names it. CI runs it after `make test` (it installs from PyPI, about 20 s).
check-bare:
	$(PYTHON) checks/bare_install.py

# docker-compose.yml really run (CI runs it after `make test`; about 8 to 9 minutes, most of it
# the rules' 5-minute hold): Debian's podman as root serves the Docker API Compose speaks;
# stand-in images are built locally (checks/compose_stack.py, deploy/standins/).
COMPOSE_TOOLS := podman mmdebstrap docker-compose
COMPOSE_PACKAGES := podman mmdebstrap docker-compose
compose-deps:
	$(call apt_install,$(COMPOSE_TOOLS),$(COMPOSE_PACKAGES))

compose-test: $(VENV)/.installed compose-deps
	$(SUDO) $(BIN)/python checks/compose_stack.py $(if $(KEEP_IMAGES),--keep-images)

# Opt-in, not part of `make test`: the heartbeat's lifecycle with the real Ultralytics package
# (tiny models trained on the CPU on synthetic data; a throwaway venv of several GB).
check-ultralytics:
	$(PYTHON) -m venv .venv-ultralytics
	.venv-ultralytics/bin/pip install --quiet torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190
	.venv-ultralytics/bin/python checks/ultralytics_heartbeat.py

# A real 2-rank Gloo DDP job judged by its work, not its sockets (issue 57). PyTorch's CPU
# build where the index serves one (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu);
# PyPI's Linux wheels bring CUDA's libraries, several GB.
check-torch:
	$(PYTHON) -m venv .venv-torch
	.venv-torch/bin/pip install --quiet 'torch>=2.4' -e '.[actuator]'
	.venv-torch/bin/python checks/torch_ddp.py

# Ten minutes at 50 webhooks/s (reliability case 44); not part of bench.
soak: setup
	$(BIN)/python benchmarks/webhook_soak.py

# Case 46 compressed: process churn through the exporter and a node agent (~30 min).
churn-soak: setup
	$(BIN)/python benchmarks/churn_soak.py --out churn-soak.json

# Many faults at once, every signal judged against the ground truth (docs/reliability.md).
# `make chaos MINUTES=60 SEED=1`; the report is chaos-report/chaos.{md,json}. With the
# tests' packages (`make setup`: PostgreSQL) it runs two actuator replicas on PostgreSQL;
# with only the demo's, one on SQLite.
MINUTES ?= 3
SEED ?= 1
chaos: demo-setup
	$(BIN)/gpu-reclaimer chaos --minutes $(MINUTES) --seed $(SEED) --out chaos-report

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
