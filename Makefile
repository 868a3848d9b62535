# The lab's two commands: `make lab` opens it, `make test` proves it.
# Everything installs into ./.venv from pinned versions (constraints.txt);
# nothing is registered globally. Re-running a target does not reinstall
# unless pyproject.toml or constraints.txt changed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_PORT ?= 8888
TB_PORT  ?= 6006
# Where `make lab` / `make student` put the student edition (generated from notebooks/).
STUDENT_DIR ?= student
# Extra JupyterLab flags (--allow-root is added by itself when you are root).
LAB_ARGS ?=
# TensorBoard's folder: runs/ unless LAB_RUNS_DIR says otherwise (as for the notebooks);
# `make tensorboard NB=06_optim` shows one notebook's runs only.
RUNS_DIR = $(or $(LAB_RUNS_DIR),runs)
# The same folder as an absolute path (a space in it kept), for kernels whose working folder is elsewhere.
RUNS_ABS = $(if $(filter /%,$(RUNS_DIR)),$(RUNS_DIR),$(CURDIR)/$(RUNS_DIR))
NB ?=
# Tests and `make regenerate` log into folders of their own, never into the student's runs/.
TEST_RUNS  := $(CURDIR)/build/test/runs
REGEN_RUNS := $(CURDIR)/build/regenerate/runs
# Workers of `make grade`: one per core (CI has 2).
JOBS ?= 2
# Workers of the test run: one more than the cores (3 on CI's 2), so that one computes while
# another waits on a kernel, a server or a sleep.
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))

.PHONY: handout site test-oldest lab lab-solutions student student-prepare test unit nbval tensorboard regenerate install clean-venv help

help:
	@echo "make lab          open JupyterLab on 127.0.0.1:$(LAB_PORT) in $(STUDENT_DIR)/ (the student edition)"
	@echo "make lab-solutions  open JupyterLab in notebooks/ (the solved sources, for instructors)"
	@echo "make student      (re)generate $(STUDENT_DIR)/ from notebooks/; FORCE=1 replaces edited copies (backed up)"
	@echo "make test         unit tests + nbval over every notebook"
	@echo "make lint         ruff check + ruff format --check (make format applies them)"
	@echo "make tensorboard  TensorBoard on 127.0.0.1:$(TB_PORT) over runs/ (one notebook: NB=06_optim; port: TB_PORT=6007)"
	@echo "make clean-runs   delete every TensorBoard run under runs/ (nothing outside it)"
	@echo "make regenerate   re-execute every notebook in place (refresh stored outputs)"
	@echo "make grade SUBMISSIONS=dir [OUT=grades] [JOBS=2]  grade handed-in notebooks (docs/instructors.md)"
	@echo "make site         the series as a static website in build/site/ (open build/site/index.html)"
	@echo "make handout      build/handout.zip: the student edition, its README and labsupport's wheel"
	@echo "make unit / make nbval  the unit tests alone / nbval over notebooks/ alone (PYTEST_ARGS=... passes options)"

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
	    -c constraints.txt -e '.[lab,test]'
	@touch $(STAMP)

# Students work in $(STUDENT_DIR)/, their own copies: `make lab` only creates the
# missing ones (never overwrites) and says when a source notebook is newer.
lab: student-prepare
	@$(call jupyterlab,$(STUDENT_DIR))

lab-solutions: $(STAMP)
	@$(call jupyterlab,notebooks)

# JupyterLab with the venv's bin/ first on its PATH, so that a notebook's `%tensorboard`,
# `!pip` and `!python` find the lab's own programs; as root (containers, Colab) it would
# refuse to start without --allow-root, which is then added (and said).
# Its kernels get LAB_RUNS_DIR, made absolute: the folder `make tensorboard` reads (runs/ of this
# repository unless you set LAB_RUNS_DIR), so a STUDENT_DIR anywhere logs there, and each
# notebook's `%tensorboard` cell (which reads lab.runs_dir(...)) shows those runs.
# config/jupyterlab/overrides.json changes two defaults of JupyterLab's settings (a student's own
# settings still win): no prompt to fetch Jupyter's news and no update check, both of which
# would reach the network. The server checks for no update either.
define jupyterlab
	$(if $(filter 0,$(shell id -u)),echo "make lab: you are root: adding --allow-root";) \
	PATH="$(abspath $(BIN)):$$PATH" LAB_RUNS_DIR='$(RUNS_ABS)' exec $(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(LAB_PORT) \
	    --ServerApp.root_dir=$(1) --LabApp.app_settings_dir=$(CURDIR)/config/jupyterlab \
	    --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	    $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)
endef

student-prepare: $(STAMP)
	@$(BIN)/python -m tools.student prepare --out $(STUDENT_DIR)

# Refuses to overwrite a student notebook that was edited, unless FORCE=1
# (which keeps a timestamped copy in $(STUDENT_DIR)/backup/ first).
student: $(STAMP)
	$(BIN)/python -m tools.student build --out $(STUDENT_DIR) $(if $(filter 1 yes true,$(FORCE)),--force)

# Unit tests, labsupport's docstring examples, ruff and nbval run in one plain pytest session,
# spread over $(TEST_JOBS) pytest-xdist workers; --dist loadscope keeps each notebook's cells in
# order on one worker (nbval runs them in one kernel). One thread per worker.
# $(TEST_RUNS) starts empty: the TensorBoard tests must see this run's logs only.
# TORCHINDUCTOR_VEC_ISA_OK=1: torch.compile (notebook 09) trusts the CPU's own list of SIMD
# instruction sets instead of test-compiling a program for each, ~15 s of a machine's first compile.
# xdist hands out the groups with most tests first (its default order): the checks' modules of
# hundreds of short tests, then the notebooks and the slow modules, the short ones last. Collection
# order instead (--no-loadscope-reorder) measured 15-25 s slower: test_tensorboard.py came last, alone.
# PYTHONDONTWRITEBYTECODE= (off): the compiled tests (their rewritten asserts), labsupport and tools
# are kept for the next run and for every kernel, even where your shell turns bytecode off.
test: $(STAMP)
	rm -rf $(TEST_RUNS)
	PYTHONDONTWRITEBYTECODE= LAB_RUNS_DIR=$(TEST_RUNS) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1 \
	    $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadscope \
	    notebooks --nbval tests labsupport --doctest-modules \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -q $(PYTEST_ARGS)

# ruff's lint and format check (settings in pyproject.toml); tests/test_style.py runs the same in `make test`.
.PHONY: lint format
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

unit: $(STAMP)
	PYTHONDONTWRITEBYTECODE= LAB_RUNS_DIR=$(TEST_RUNS) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadscope \
	    tests labsupport --doctest-modules -q $(PYTEST_ARGS)

nbval: $(STAMP)
	PYTHONDONTWRITEBYTECODE= LAB_RUNS_DIR=$(TEST_RUNS) OMP_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1 $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadscope notebooks \
	    --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg -q $(PYTEST_ARGS)

# Loopback only (127.0.0.1), on the first free port from $(TB_PORT) up (an inline
# `%tensorboard` in a notebook may hold 6006): free means that no server on 127.0.0.1
# accepts a connection there. The URL is printed first. TensorBoard does not check the
# Host header, so a web page can reach it by DNS rebinding: docs/tensorboard.md says how
# to keep it local. Ctrl-C stops TensorBoard and its data-server child alike
# (tests/test_tensorboard_tools.py checks that none survives); the data server also shows a
# rerun's replaced run without a restart.
tensorboard: $(STAMP)
	$(eval TB_FREE_PORT := $(or $(shell $(BIN)/python -c 'import socket, sys; print(next(p for p in range(int(sys.argv[1]), 65536) if socket.socket().connect_ex(("127.0.0.1", p))))' $(TB_PORT) 2>/dev/null),$(TB_PORT)))
	@test -d $(RUNS_DIR)/$(NB) || echo "make tensorboard: no $(RUNS_DIR)/$(NB) yet; runs appear once a notebook logs them"
	@echo "make tensorboard: $(if $(filter-out $(TB_PORT),$(TB_FREE_PORT)),port $(TB_PORT) is in use (an inline %tensorboard?); )open http://127.0.0.1:$(TB_FREE_PORT)/?smoothing=0 (curves unsmoothed: Settings changes it)"
	$(BIN)/tensorboard --logdir $(RUNS_DIR)$(if $(NB),/$(NB)) --host 127.0.0.1 --port $(TB_FREE_PORT)

# Empties runs/ and touches nothing else: refuses when runs is a symbolic link or
# not a folder, and neither find nor rm follows links found inside runs/.
.PHONY: clean-runs
clean-runs:
	@if [ -L runs ]; then echo "clean-runs: runs is a symbolic link (to $$(readlink runs));" \
	    "not deleting through it: clean its target by hand" >&2; exit 1; fi
	@if [ -e runs ] && [ ! -d runs ]; then echo "clean-runs: runs is not a folder; left alone" >&2; exit 1; fi
	@if [ -d runs ]; then find runs -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; fi
	@echo "runs/ is empty"

# One thread, as in `make test`: float sums (and so plotted curves) then come out
# bit-identical on every run.
regenerate: $(STAMP)
	LAB_RUNS_DIR=$(REGEN_RUNS) OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1 \
	    $(BIN)/python -m tools.regenerate notebooks/*.ipynb

# Grades a folder of submissions (one sub-folder per student, Canvas's flat files or a zip) into
# $(OUT)/, merged into the gradebook already there: grades.csv, gradebook.csv, report.html,
# feedback/, results.jsonl and a log. Each notebook runs in its own sandboxed kernel, $(JOBS) at a
# time. SHARD=k/N grades the k-th of N parts (combine them: python -m tools.grade --out all --merge ...).
OUT ?= grades
.PHONY: grade
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=<folder> [OUT=grades] [JOBS=2] [SHARD=k/N]" >&2; exit 2; }
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m tools.grade "$(SUBMISSIONS)" --out "$(OUT)" --jobs $(JOBS) \
	    $(if $(SHARD),--shard $(SHARD)) $(GRADE_ARGS)

clean-venv:
	rm -rf $(VENV)

# The suite on the oldest supported pair (pyproject's floors), in a second venv.
# Not part of `make test`: it downloads another PyTorch (several GB, minutes).
OLDEST_VENV ?= .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.installed
$(OLDEST_STAMP): pyproject.toml constraints-oldest.txt
	@test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	    -c constraints-oldest.txt -e '.[lab,test]'
	@touch $@

# STAMP points the inner `make test` at this venv's own stamp, so it never installs the
# current pins into the oldest venv.
test-oldest: $(OLDEST_STAMP)
	LAB_PINS=constraints-oldest.txt $(MAKE) -o $(OLDEST_STAMP) test BIN=$(OLDEST_VENV)/bin STAMP=$(OLDEST_STAMP)

# The series as a static website in build/site/ (stored outputs, no solutions; each page
# links to its notebook in Colab and to its student edition): see tools/website.py.
# It works offline: MathJax is copied in from jupyter-server-mathjax, nothing comes from a CDN.
site: $(STAMP)
	$(BIN)/python -m tools.website --out build/site

# What students get: the student edition, its README and a wheel of labsupport, zipped (never
# the repository: notebooks/ and tests/ hold answers). The README says the one command that
# installs the wheel; the wheel is built from a copy of the package (the repository's build/
# and egg-info stay as they are), offline: --no-build-isolation uses this venv's setuptools.
handout: $(STAMP)
	rm -rf build/handout build/handout.zip build/handout-wheel
	$(BIN)/python -m tools.student handout --out build/handout
	mkdir -p build/handout-wheel && cp -R pyproject.toml README.md labsupport build/handout-wheel/
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
	    -w build/handout build/handout-wheel
	rm -rf build/handout-wheel
	cd build && $(abspath $(BIN))/python -m zipfile -c handout.zip handout/
	@echo "build/handout.zip: the student edition, README.md and labsupport's wheel (pip install labsupport-*.whl)"
