# Transformers from scratch.
#   make lab       open the first lesson in JupyterLab
#   make test      run the project's tests and re-execute every solution notebook
#   make lessons   regenerate lessons/ from solutions/ (after editing a solution notebook)
#   make bench     every speed figure in one table, a class of 100 graded included (BENCH=--quick); bench-grading: nbgrader vs the trusted grader
#   make release   write release/<lesson>/: what a class receives for each lesson (LESSONS="01 02": only those)
#   make autograde trusted scores for every submission in submitted/, into nbgrader's gradebook and autograded/
#   make gradescope LESSON=01   gradescope/<lesson>.zip: the lesson's autograder for Gradescope
# Each target first makes the virtual environment (.venv) if it is missing or stale.

PYTHON ?= python3
VENV ?= .venv
LESSON ?= lessons/01_self_attention/01_self_attention.ipynb
PORT ?= 8888

BIN := $(abspath $(VENV))/bin
# Installed when requirements.txt or pyproject.toml last changed.
STAMP := $(VENV)/.installed
# The environment's tools (jupyter, nbgrader and the alembic it calls) come first.
export PATH := $(BIN):$(PATH)

# Jupyter refuses to run as root (containers, CI machines) unless told to.
AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg --nbval-cell-timeout 300

.PHONY: help venv lab test lessons bench bench-grading release autograde gradescope

help:
	@sed -n '2,9p' Makefile | sed 's/^# *//'

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install -e .
	@touch $(STAMP)

# JupyterLab's defaults for this course, in the environment's own settings folder: no "Would
# you like to get notified about official Jupyter news?" pop-up on the first start (answering
# it fetches a feed from the internet) and no update check.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json

$(LAB_OVERRIDES): $(STAMP)
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' > $@

lab: $(STAMP) $(LAB_OVERRIDES)
	@token=$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(24))'); \
	echo "Opening $(LESSON) in JupyterLab; if no browser opens, open"; \
	echo "    http://127.0.0.1:$(PORT)/lab/tree/$(LESSON)?token=$$token"; \
	echo "Stop it with Ctrl-C."; \
	JUPYTER_TOKEN=$$token $(BIN)/jupyter lab "$(LESSON)" --ServerApp.root_dir="$(CURDIR)" \
	    --ServerApp.port=$(PORT) --ServerApp.port_retries=0 --ServerApp.log_level=WARN --LabApp.news_url=None $(AS_ROOT)

# One test file (or notebook) per core at a time, the longest first (tests/conftest.py); the
# tests' tiny tensors run fastest on one thread.
# The grader's tests run student code in bubblewrap's sandbox (autograder/grading/sandbox/jail.py).
test: $(STAMP)
	@if [ "$$(uname)" = Linux ] && ! command -v bwrap >/dev/null; then \
	    echo "make test needs bubblewrap, the grader's sandbox: sudo apt-get install bubblewrap"; exit 2; fi
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder $(NBVAL) tests/ solutions/

lessons: $(STAMP)
	$(BIN)/python -m autograder.lessons

# LESSONS= builds only those lessons, by number or name, e.g. make release LESSONS="01 02". Each
# bundle holds the model answers of the lessons before it: the output says which.
release: $(STAMP)
	$(BIN)/python -m autograder release release $(LESSONS)

# LESSONS= limits it to some lessons, e.g. make autograde LESSONS=01_self_attention. It runs no
# notebook outside the sandbox: it writes the autograded/ notebooks that feedback reads itself.
autograde: $(STAMP)
	$(BIN)/python -m autograder autograde $(LESSONS)

# The Gradescope autograder of one lesson, e.g. make gradescope LESSON=01 (LESSON's default is
# make lab's notebook: name the lesson).
gradescope: $(STAMP)
	@test "$(origin LESSON)" != file || { echo "name the lesson: make gradescope LESSON=01"; exit 2; }
	$(BIN)/python -m autograder gradescope $(LESSON)

# nbval and grading seconds per notebook, a class of 100 students x every lesson graded at once
# (warm, and 8 students with fresh interpreters), lesson 06's and 07's training (3 seeds),
# reference vs torch.nn speed, lesson 08's attention, then one table of every figure. BENCH= passes options, e.g. BENCH="--quick" or
# BENCH="--only nn" (python -m bench.all --help lists them).
BENCH ?=
bench: $(STAMP)
	$(BIN)/python -m bench.all $(BENCH)

# Plain nbgrader autograde vs the trusted grader on a synthetic class. STUDENTS= sets its size
# (50 takes hours on 2 cores).
STUDENTS ?= 50
bench-grading: $(STAMP)
	$(BIN)/python bench/grading.py --students $(STUDENTS)
