# Two entry points: `make run` (demo on the bundled captures) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

.PHONY: run test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/kafkacap export sample_pcaps -o out --summary --detect-ports

test: $(STAMP)
	$(BIN)/ruff check analyzer dissectors spark_jobs tests benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check analyzer dissectors spark_jobs tests benchmarks

clean:
	rm -rf $(VENV) out .pytest_cache
