# Two entry points: `make run` (demo on the bundled captures) and `make test` (the whole suite).
# The interpreter for .venv: the first Python >= 3.11 with venv support. The distribution's /usr/bin/python3
# comes first: distributions build it with profile-guided optimisation, and on the benchmark capture it runs
# the packet loop about 15% faster than a plain source build of the same version (benchmarks/JOURNAL.md).
PYTHON ?= $(shell for p in /usr/bin/python3 python3; do $$p -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)
ifeq ($(PYTHON),)
$(error no Python >= 3.11 with the venv module found; set PYTHON=/path/to/python3.11+)
endif
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

.PHONY: run test lint clean

RUN_STAMP = $(VENV)/.installed-run
BUILT = $(VENV)/.built
# The compiled core's sources: a change rebuilds the extension modules in place (pip install -e runs setup.py).
CORE_SOURCES = setup.py $(shell find analyzer dissectors -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' 2>/dev/null)

# `make run` needs only the tool (the venv's own pip installs it: no upgrade to wait for); `make test` also the
# test tools and the real broker and clients.
# A working .venv is reused (whichever Python made it); a missing or broken one is made afresh: running
# `python -m venv` over a venv another Python made can fail half-way and leave it broken.
VENV_READY = $(BIN)/python -c '' 2>/dev/null || $(PYTHON) -m venv --clear $(VENV)

$(RUN_STAMP): pyproject.toml
	$(VENV_READY)
	$(BIN)/python -m pip install -q -e .
	touch $(RUN_STAMP) $(BUILT)

$(STAMP): pyproject.toml
	$(VENV_READY)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,record,notebook,spark]'
	touch $(STAMP) $(RUN_STAMP) $(BUILT)

$(BUILT): $(CORE_SOURCES) | $(RUN_STAMP)
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(BUILT)

run: $(RUN_STAMP) $(BUILT)
	$(BIN)/kafkacap export sample_pcaps -o out --summary --detect-ports --deliveries

test: $(STAMP) $(BUILT)
	$(BIN)/ruff check analyzer dissectors spark_jobs tests benchmarks sample_pcaps tools
	$(BIN)/python -m pytest -q --durations=15

lint: $(STAMP)
	$(BIN)/ruff check analyzer dissectors spark_jobs tests benchmarks sample_pcaps tools

clean:
	rm -rf $(VENV) out .pytest_cache build
	find analyzer dissectors \( -name "*.so" -o -name "*.c" -o -name "*.html" \) -delete
