# ReproBook entry points.  `make book` and `make test` each do their own setup
# (Debian packages, the pinned venv, the data) and are idempotent.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MATHJAX := book/_static/mathjax/tex-chtml.js
MATHJAX_VERSION := 3.2.2

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export RAY_TMPDIR := $(CURDIR)/.cache/ray
export FLWR_HOME := $(CURDIR)/.cache/flwr
export MPLCONFIGDIR := $(CURDIR)/.cache/matplotlib
export DVC_NO_ANALYTICS := 1
export PYTHONDONTWRITEBYTECODE := 1
export JUPYTER_PLATFORM_DIRS := 1

.PHONY: setup apt venv data dvcyaml run book html test lint bench lock gpu-lock clean

## `make book PROFILE=smoke` builds the quick book from smoke runs; `make book COURSE=<name>` a book of the
## chapters in book/courses/<name>.yaml (only those are run)
PROFILE ?= cpu
COURSE ?=
BOOK_DIR := $(if $(COURSE),build/courses/$(COURSE),book)

setup: apt venv $(MATHJAX)

## Debian packages listed in envs/apt.txt, installed only when missing
apt:
	@missing=""; for p in $$(grep -v '^#' envs/apt.txt); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

## the pinned CPU environment (envs/cpu.lock) in .venv
venv: $(STAMP)
$(STAMP): envs/cpu.lock pyproject.toml envs/simgrid-setup.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U 'pip>=26'
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r envs/cpu.lock
	$(PY) -m pip install -q --no-deps -e .
	bash envs/simgrid-setup.sh $(VENV)
	mkdir -p $(RAY_TMPDIR) $(FLWR_HOME) $(MPLCONFIGDIR)
	touch $@

## MathJax served from the book itself (the book must render offline)
$(MATHJAX):
	command -v npm >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm)
	tmp=$$(mktemp -d); (cd $$tmp && npm pack -q mathjax@$(MATHJAX_VERSION) >/dev/null && tar xzf mathjax-$(MATHJAX_VERSION).tgz); \
	mkdir -p book/_static/mathjax/output/chtml/fonts; \
	cp -r $$tmp/package/es5/output/chtml/fonts/woff-v2 book/_static/mathjax/output/chtml/fonts/; \
	cp $$tmp/package/es5/tex-chtml.js $(MATHJAX); rm -rf $$tmp

## datasets under data/, tracked by data.dvc and pushed to the local remote.  `repro data` builds
## what is missing and refuses data that differs from data.dvc, so `dvc add` never blesses a corruption.
data: setup
	repro data
	dvc add -q data
	dvc push -q data.dvc

## dvc.yaml, regenerated from the chapter registry
dvcyaml: setup
	repro dvc

## rerun the chapters whose inputs changed, at the cpu profile, through DVC
run: data dvcyaml
	dvc repro -q

## the HTML book: the full cpu book runs through DVC; a quick (PROFILE=smoke) or course book runs what is
## not fresh itself, one line per chapter
book: data dvcyaml
	@if [ "$(PROFILE)" = cpu ] && [ -z "$(COURSE)" ]; then dvc repro -q; fi
	repro book --profile $(PROFILE) $(if $(COURSE),--course $(COURSE)) --run
	jupyter-book build $(BOOK_DIR) -W -n --keep-going -q
	@echo "book: $(CURDIR)/$(BOOK_DIR)/_build/html/index.html"

## lint: ruff (pycodestyle, pyflakes, import order, numpy-style docstrings, at most 8 arguments a function)
## and mypy over lib/repro (the machinery strict, the families with their untyped bodies checked; pyproject.toml)
lint: setup
	ruff check lib tests bench
	mypy

## lint, unit tests, every chapter at the smoke profile, and a -W book build
test: data lint
	python -m pytest -n 2 --dist loadfile -q

## benchmarks, side by side with ratios
bench: data
	python bench/run.py

## re-resolve envs/cpu.lock from envs/cpu.in (maintainers)
lock:
	tmp=$$(mktemp -d); python3 -m venv $$tmp/v; $$tmp/v/bin/pip install -q -U 'pip>=26'; \
	$$tmp/v/bin/pip install -q torch==2.13.0; $$tmp/v/bin/pip install -q -r envs/cpu.in; \
	$$tmp/v/bin/pip freeze --exclude-editable > envs/cpu.lock; rm -rf $$tmp

## re-resolve envs/gpu.lock: cpu.lock's pins with the CUDA build of torch and the libraries it needs.
## pip's dry run reads the wheels' metadata only, so nothing of several GB is downloaded; the local
## wheel folder and pip config are left out so the registry's CUDA torch is seen (maintainers)
gpu-lock:
	tmp=$$(mktemp -d); python3 -m venv $$tmp/v; grep -v '^torch==' envs/cpu.lock > $$tmp/pins.txt; \
	env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null $$tmp/v/bin/pip install -q --dry-run --ignore-installed \
	  --report $$tmp/report.json -c $$tmp/pins.txt -r envs/gpu.in && \
	python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); \
	  print("# envs/gpu.lock: resolved by make gpu-lock from envs/gpu.in and the pins of envs/cpu.lock"); \
	  [print(f"{n}=={v}") for n, v in sorted((i["metadata"]["name"], i["metadata"]["version"]) for i in r["install"])]' \
	  $$tmp/report.json > envs/gpu.lock; rm -rf $$tmp

clean:
	rm -rf build results book/_build book/chapters book/_toc.yml book/scoreboard.md .cache
