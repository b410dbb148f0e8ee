# The README's two commands: `make run` and `make test`. Both work on a fresh machine with
# only Python >= 3.10 and the package registries.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.installed-run
STAMP_DEV  := $(VENV)/.installed-dev
RUN_ARGS ?=

.PHONY: run test lint typecheck pytest promtool bench image image-test clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Editable installs in "compat" mode add a plain path to a .pth file; the default mode installs
# an import-hook finder that costs ~20 ms at every start of `mcpnode`.
# Bytecode is compiled once after the install: where PYTHONDONTWRITEBYTECODE is set (CI images,
# this project's build machines) an editable install would otherwise compile every module from
# source at every start of `mcpnode` (a third of `mcpnode topo`'s time).
$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e . --config-settings editable_mode=compat
	touch $@

$(STAMP_DEV): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $@ $(STAMP_RUN)

# Man pages and completion, generated from the command tree into the venv where a wheel would
# put them (an editable install carries no data files); redone when a command changes. The
# line it prints says how to reach them.
STAMP_DOCS := $(VENV)/.installed-docs
$(STAMP_DOCS): $(wildcard mcpnode/cli/*.py) tools/manpages.py | $(STAMP_RUN)
	@$(PY) -m tools.manpages --prefix $(VENV)
	@touch $@

# Up to date in ~50 ms when nothing changed (compileall compares mtimes).
bytecode:
	@$(PY) -m compileall -q mcpnode

## make run: set up .venv, audit this host, then show its topology (both read-only).
## The audit's exit 1 (something FAILed) is its result, not a failure of `make run`: topo still
## runs and make succeeds. Exit 2 (the audit could not run) makes `make run` fail, after topo.
## AUDIT_ARGS go to the audit (--format json, --only 'gpu.*'), RUN_ARGS to topo (--tree).
AUDIT_ARGS ?=
run: $(STAMP_RUN) bytecode $(STAMP_DOCS)
	@$(VENV)/bin/mcpnode audit $(AUDIT_ARGS); rc=$$?; \
	echo; $(VENV)/bin/mcpnode topo $(RUN_ARGS) || exit $$?; \
	if [ $$rc -ge 2 ]; then echo "make run: mcpnode audit could not run (exit $$rc)" >&2; exit $$rc; fi; \
	if [ $$rc -eq 1 ]; then echo "make run: the audit found failures (exit 1): see its Remedies above"; fi

## make test: set up .venv with dev extras, then ruff, mypy and the whole pytest suite.
test: $(STAMP_DEV) bytecode promtool lint typecheck pytest

## promtool, for the alert rule tests (tests/deploy/test_alert_rules.py; they skip without it):
## the one from PATH, else Debian's `prometheus` package's, as root where apt-get is. Only its
## promtool is unpacked into the venv (apt-get download, dpkg-deb): installing the package would
## also enable and start a Prometheus server on the host.
promtool: $(STAMP_DEV)
	@command -v promtool >/dev/null 2>&1 || [ -x $(VENV)/bin/promtool ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    d=$$(mktemp -d); \
	    (cd $$d && apt-get update -qq && apt-get download -qq prometheus) >/dev/null 2>&1 && \
	    dpkg-deb --fsys-tarfile $$d/prometheus_*.deb | tar -xO ./usr/bin/promtool > $$d/promtool && \
	    install -m 755 $$d/promtool $(VENV)/bin/promtool || \
	      echo "promtool: Debian's prometheus package could not be fetched: alert rule tests skip"; \
	    rm -rf $$d; \
	  else echo "promtool missing (apt-get install prometheus): the alert rule tests skip"; fi; }

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check mcpnode tests bench tools
	$(VENV)/bin/ruff format --check mcpnode tests bench tools

typecheck: $(STAMP_DEV)
	$(VENV)/bin/mypy

pytest: $(STAMP_DEV)
	$(VENV)/bin/pytest -q

## make bench: discovery benchmarks against hwloc's lstopo (installs Debian's hwloc if absent).
bench: $(STAMP_DEV) bytecode
	@command -v lstopo-no-graphics >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hwloc >/dev/null; \
	  else echo "lstopo-no-graphics missing (apt-get install hwloc): lstopo comparisons skipped"; fi; }
	$(PY) bench/run.py

## make image: the container image, built offline from Debian packages and PyPI wheels (root;
## installs mmdebstrap, umoci and skopeo if absent): build/image/mcpnode-VERSION.oci.tar.
## image-test: build it, then run tests/deploy/test_image.py on it (chroot, image config).
image: $(STAMP_DEV)
	PYTHON=$(PY) bash image/build.sh

image-test: image
	$(VENV)/bin/pytest -q tests/deploy/test_image.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
