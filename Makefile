# GPU Reclaimer: the two newcomer commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SYSTEM_TOOLS := prometheus promtool prometheus-alertmanager amtool

.PHONY: setup system-deps test lint unit rules demo bench clean

setup: $(VENV)/.installed system-deps

# Re-install when the project's dependencies change.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Prometheus and Alertmanager come from Debian packages; tests start them on loopback.
system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing prometheus and prometheus-alertmanager (missing:$$missing)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq prometheus prometheus-alertmanager; \
	fi

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

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

bench: setup
	$(BIN)/python benchmarks/exporter_scrape.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
