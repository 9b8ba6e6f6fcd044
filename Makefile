# Two commands on a fresh machine with python3:  make run   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
# Small matrices: one BLAS thread per process is faster and keeps tests repeatable.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

.PHONY: install run test bench
install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/kdrsdl run --source synthetic --max-frames 600 --output out

test: $(VENV)/.installed
	$(PY) -m pytest -q -ra tests

bench: $(VENV)/.installed
	OPENBLAS_NUM_THREADS=2 $(PY) tests/bench/bench_solver.py
