# Two commands on a fresh machine with python3:  make run   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
# Small matrices: one BLAS thread per process is faster and keeps tests repeatable.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

# setuptools warns on every editable install that a folder named like the package (core/, streamer/)
# may shadow it: here that folder is the package itself, so the warning is silenced.
export PYTHONWARNINGS ?= ignore:Editable installation

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

.PHONY: install run test lint bench bench-denoise
install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/kdrsdl run --source synthetic --max-frames 600 --output out

test: $(VENV)/.installed lint
	$(PY) -m pytest -q -ra tests

# Lint, format and types (pyproject.toml: [tool.ruff], [tool.mypy]); part of `make test`.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check core streamer tests examples
	$(VENV)/bin/ruff format --check core streamer tests examples
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	OPENBLAS_NUM_THREADS=2 $(PY) tests/bench/bench_solver.py

# The paper's denoising benchmarks; writes out/denoise.json and out/denoise.png (not committed: the
# images are derived from Yale-B and Facade). The [denoise] extra is piq (FSIM), which brings PyTorch.
bench-denoise: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[denoise]'
	mkdir -p out
	$(PY) tests/bench/bench_denoise.py --sweep --json out/denoise.json --figure out/denoise.png
