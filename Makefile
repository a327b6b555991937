# Photon: the two commands of the quick start are `make demo` and `make test`.
# Each installs what it needs (Debian packages, the virtualenv from the lock),
# starts what it needs and stops it again.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The Spark drivers' class archive (spark_apps/class_archive.py), built after the packages.
ARCHIVE := $(VENV)/.class-archive
# uv installs the lock's ~300 packages in a fraction of pip's time (CI installs afresh).
UV     := uv==0.13.8
# pytest-xdist workers of `make test` (three on two cores: see the test target).
PYTEST_WORKERS ?= 3

.PHONY: demo compose-demo test lint unit integration e2e install system-deps lock clean

demo: install                       ## the main job on embedded defaults
	$(BIN)/photon demo

compose-demo: install               ## the demo on the compose stack (docker-compose.yml)
	$(BIN)/photon compose demo

test: system-deps $(STAMP)          ## the whole suite: lint, unit, integration, e2e
	# Lint beside the class archive: two half-minute single-process steps, two cores.
	@$(MAKE) --no-print-directory -j2 lint $(ARCHIVE)
	# Three workers on two cores: the suite waits as well as works (Spark start-ups, DAG
	# runs, the chaos run's holds, alert rules' holds), and a third worker keeps the cores
	# busy meanwhile (docs/deploy.md, "What was run here"). tests/conftest.py schedules (it
	# overrides --dist): the long end-to-end units first, one a worker, the rest behind.
	# The compose stack's images build meanwhile (about one core, half of it waiting on
	# downloads): a cold build would otherwise add minutes after the rest. Its stack's
	# twenty containers want the whole machine: its tests run alone, after the rest, told
	# (COMPOSE_IMAGES_BUILT) when that build succeeded: they need not check it again.
	# A worker that crashes (the suite's watchdog ends a hung test's worker: tests/watchdog.py)
	# fails its test and ends the run: xdist would hand that test to a new worker again.
	@mkdir -p .artifacts; \
	$(BIN)/photon compose build > .artifacts/compose-build.log 2>&1 & build=$$!; \
	trap 'kill $$build 2>/dev/null; wait $$build 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --max-worker-restart=0 -m "not compose" || { kill $$build 2>/dev/null; wait $$build; exit 1; }; \
	if wait $$build; then images=yes; else images=; tail -25 .artifacts/compose-build.log; \
	  echo "photon compose build failed: the compose tests build again"; fi; \
	COMPOSE_IMAGES_BUILT=$$images $(BIN)/python -m pytest -m compose

unit integration e2e: install       ## one tier of the suite
	$(BIN)/python -m pytest -m $@

lint: system-deps $(STAMP)          ## ruff and mypy, as CI runs them
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

install: system-deps $(STAMP) $(ARCHIVE)

system-deps:
	./infra/install-system-deps.sh

$(STAMP): pyproject.toml constraints.txt locks/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(UV)
	# uv's cache keeps every pyspark build it has made, ~1.9 GB each (this registry has uv
	# fetch and build the sdist afresh on every install): 60 installs filled a 250 GB disk.
	# `uv cache prune` drops only what nothing points to: before (room for this install)
	# and after (what this one left behind). A failed prune never stops an install.
	-$(BIN)/uv cache prune --quiet
	# Bytecode compiled once here (pip's default, not uv's): where PYTHONDONTWRITEBYTECODE
	# is set, every process (each Spark worker, each CLI call) compiled what it imported.
	# Every package from the hashed lock (a changed file is refused), then the project.
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --require-hashes -r locks/dev.txt
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps -e .
	-$(BIN)/uv cache prune --quiet
	$(BIN)/python -m compileall -q photon spark_apps registry dags plugins
	touch $(STAMP)

$(ARCHIVE): $(STAMP) spark_apps/class_archive.py
	# Spark drivers start in half the time with it; without one they start as before.
	$(BIN)/python -m spark_apps.class_archive || echo "no class archive: Spark drivers load their classes themselves"
	touch $(ARCHIVE)

lock:                               ## re-resolve pyproject.toml: constraints.txt, then the hashed locks
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet -e '.[dev]'
	{ head -3 constraints.txt; .lock-venv/bin/pip freeze --exclude-editable \
	  | grep -v '^photon-streams'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .lock-venv
	# One hashed lock per role (docs/deploy.md, "What each image installs"), all at
	# constraints.txt's versions; the images' for their Python, Debian bookworm's 3.11.2
	# (below 3.11.3 redis needs async-timeout, the one package only there). A package pinned
	# with extras is pinned twice, with them and without (uvicorn[standard], uvicorn): pip's
	# hash-checking mode, the images' installer, takes each form as a requirement of its own.
	$(BIN)/uv pip compile pyproject.toml --extra pipeline -c constraints.txt --generate-hashes --no-strip-extras \
	  --python-version 3.11.2 --custom-compile-command "make lock" --quiet -o locks/pipeline.txt
	$(BIN)/uv pip compile pyproject.toml --extra airflow --extra verify -c constraints.txt --generate-hashes --no-strip-extras \
	  --python-version 3.11.2 --custom-compile-command "make lock" --quiet -o locks/airflow.txt
	$(BIN)/uv pip compile pyproject.toml --extra pipeline --extra stack -c constraints.txt --generate-hashes --no-strip-extras \
	  --python-version 3.11.2 --custom-compile-command "make lock" --quiet -o locks/stack.txt
	$(BIN)/uv pip compile pyproject.toml --extra dev -c constraints.txt --generate-hashes --no-strip-extras \
	  --python-version 3.11.7 --custom-compile-command "make lock" --quiet -o locks/dev.txt
	$(BIN)/python infra/lock_with_extras.py locks/pipeline.txt locks/airflow.txt locks/stack.txt locks/dev.txt

clean:                              ## remove the virtualenv and local state
	-[ -x $(BIN)/photon ] && $(BIN)/photon down --purge
	rm -rf $(VENV) .photon .mypy_cache .ruff_cache .pytest_cache .hypothesis
