# Quick start on a fresh Debian 12 machine, as root:
#   make demo   - install what is needed, boot the emulated lab fleet and deploy it
#   make test   - install what is needed, then run every test (unit, deploy, lab end-to-end)
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
APT_PACKAGES = systemd-container debootstrap docker-registry skopeo iproute2 procps curl
STAMP = .make

.PHONY: setup test lint unit e2e demo demo-down clean

$(STAMP)/apt:
	@mkdir -p $(STAMP)
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PACKAGES); fi
	@touch $@

$(STAMP)/pip: pyproject.toml
	@mkdir -p $(STAMP)
	$(PIP) install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

setup: $(STAMP)/apt $(STAMP)/pip

lint: setup
	ruff check specdec roles deploys inventories group_data tests benchmarks
	mypy

unit: setup
	$(PYTHON) -m pytest -q tests --ignore=tests/e2e

e2e: setup
	$(PYTHON) -m pytest -q tests/e2e

test: setup lint
	$(PYTHON) -m pytest -q -ra tests

demo: setup
	specdec lab up inventories/lab.py
	specdec rollout inventories/lab.py --batches 1,100%
	specdec lab status inventories/lab.py
	@echo "The lab stays up: try 'specdec lab status inventories/lab.py'; 'make demo-down' removes it."

demo-down: setup
	specdec lab down inventories/lab.py

clean:
	rm -rf $(STAMP) .pytest_cache .mypy_cache .ruff_cache reports
