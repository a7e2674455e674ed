# GPU Reclaimer: the two newcomer commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SYSTEM_TOOLS := prometheus promtool prometheus-alertmanager amtool docker-compose slapd openssl chromium chromedriver pg_ctlcluster slurmctld slurmd slurmrestd munged

.PHONY: setup system-deps secrets test lint unit rules demo day bench bench-nvitop soak clean protos check-ultralytics check-bare

setup: $(VENV)/.installed system-deps

# Re-install when the project's dependencies change.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $@

# Prometheus, Alertmanager, OpenLDAP (slapd), PostgreSQL, Slurm (slurm-wlm, munge) and
# Chromium with its driver come from Debian packages; tests start them on loopback
# (PostgreSQL: initdb + pg_ctl; Slurm: slurmctld + slurmd with a count-only GPU GRES). docker-compose (Compose 1) validates
# docker-compose.yml without a Docker engine.
system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do PATH="$$PATH:/usr/sbin" command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing prometheus, prometheus-alertmanager, docker-compose, slapd, openssl, postgresql, slurm-wlm, slurmrestd and chromium (missing:$$missing)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq prometheus prometheus-alertmanager docker-compose slapd openssl postgresql slurm-wlm slurmrestd munge chromium chromium-driver; \
	fi

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
secrets: deploy/secrets/actuator-token
deploy/secrets/actuator-token:
	mkdir -p deploy/secrets
	umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(32))' > $@
	@echo "wrote $@ (keep it secret; see docs/deployment.md)"

rules: setup
	promtool check rules alert-rules/*.rules.yml
	cd alert-rules && promtool test rules tests/*.test.yml
	promtool check config deploy/prometheus.yml
	amtool check-config deploy/alertmanager.yml

unit: setup
	$(BIN)/pytest -q

test: lint rules unit

demo: setup
	$(BIN)/gpu-reclaimer demo

day: setup  # the measured simulated day: observe vs enforce, about 25 minutes
	$(BIN)/gpu-reclaimer demo --day

bench: setup
	$(BIN)/python benchmarks/exporter_scrape.py
	$(BIN)/python benchmarks/exporter_floor.py
	$(BIN)/python benchmarks/actuator_webhook.py
	$(BIN)/python benchmarks/e2e_latency.py
	$(BIN)/python benchmarks/slow_clients.py
	$(BIN)/python benchmarks/pod_resources.py

# Side by side with nvitop-exporter (installed into a throwaway venv from PyPI).
bench-nvitop: setup
	$(BIN)/python benchmarks/exporter_vs_nvitop.py --install

# The bare package (no extras) in a fresh venv: the exporter serves, a command that needs
# an extra names it. CI runs it after `make test` (it installs from PyPI, about 20 s).
check-bare:
	$(PYTHON) checks/bare_install.py

# Opt-in, not part of `make test`: the heartbeat's lifecycle with the real Ultralytics package
# (tiny models trained on the CPU on synthetic data; a throwaway venv of several GB).
check-ultralytics:
	$(PYTHON) -m venv .venv-ultralytics
	.venv-ultralytics/bin/pip install --quiet torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190
	.venv-ultralytics/bin/python checks/ultralytics_heartbeat.py

# Ten minutes at 50 webhooks/s (reliability case 44); not part of bench.
soak: setup
	$(BIN)/python benchmarks/webhook_soak.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
