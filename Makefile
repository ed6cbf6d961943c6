# Two entry points: `make run` (demo on the bundled captures) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

.PHONY: run test lint clean

RUN_STAMP = $(VENV)/.installed-run

# `make run` needs only the tool; `make test` also the test tools and the real broker and clients.
$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,record]'
	touch $(STAMP) $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/kafkacap export sample_pcaps -o out --summary --detect-ports

test: $(STAMP)
	$(BIN)/ruff check analyzer dissectors spark_jobs tests benchmarks sample_pcaps
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check analyzer dissectors spark_jobs tests benchmarks sample_pcaps

clean:
	rm -rf $(VENV) out .pytest_cache
