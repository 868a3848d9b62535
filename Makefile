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
# Extra JupyterLab flags, e.g. LAB_ARGS=--allow-root inside a container running as root.
LAB_ARGS ?=
# Workers for the test run: one per core (CI has 2).
JOBS ?= 2

.PHONY: lab lab-solutions student student-prepare test unit nbval tensorboard regenerate install clean-venv help

help:
	@echo "make lab          open JupyterLab on 127.0.0.1:$(LAB_PORT) in $(STUDENT_DIR)/ (the student edition)"
	@echo "make lab-solutions  open JupyterLab in notebooks/ (the solved sources, for instructors)"
	@echo "make student      (re)generate $(STUDENT_DIR)/ from notebooks/; FORCE=1 replaces edited copies (backed up)"
	@echo "make test         unit tests + nbval over every notebook"
	@echo "make tensorboard  TensorBoard on 127.0.0.1:$(TB_PORT) over runs/ (another port: TB_PORT=6007)"
	@echo "make clean-runs   delete every TensorBoard run under runs/ (nothing outside it)"
	@echo "make regenerate   re-execute every notebook in place (refresh stored outputs)"

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
	    -c constraints.txt -e .
	@touch $(STAMP)

# Students work in $(STUDENT_DIR)/, their own copies: `make lab` only creates the
# missing ones (never overwrites) and says when a source notebook is newer.
lab: student-prepare
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(LAB_PORT) \
	    --ServerApp.root_dir=$(STUDENT_DIR) $(LAB_ARGS)

lab-solutions: $(STAMP)
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(LAB_PORT) \
	    --ServerApp.root_dir=notebooks $(LAB_ARGS)

student-prepare: $(STAMP)
	@$(BIN)/python tools/student.py prepare --out $(STUDENT_DIR)

# Refuses to overwrite a student notebook that was edited, unless FORCE=1
# (which keeps a timestamped copy in $(STUDENT_DIR)/backup/ first).
student: $(STAMP)
	$(BIN)/python tools/student.py build --out $(STUDENT_DIR) $(if $(filter 1 yes true,$(FORCE)),--force)

# Unit tests, labsupport's docstring examples and nbval run in one pytest session,
# spread over $(JOBS) workers; --dist loadscope keeps each notebook's cells in order
# on one worker. One thread per worker: two workers share CI's two cores.
# TORCHINDUCTOR_VEC_ISA_OK=1: torch.compile (notebook 09) trusts the CPU's own list of SIMD
# instruction sets instead of test-compiling a program for each, ~15 s of a machine's first compile.
test: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadscope \
	    tests labsupport --doctest-modules notebooks --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -q $(PYTEST_ARGS)

unit: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadscope \
	    tests labsupport --doctest-modules -q $(PYTEST_ARGS)

nbval: $(STAMP)
	OMP_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadscope notebooks \
	    --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -q $(PYTEST_ARGS)

# Loopback only; a fixed port so the address stays the same (override: TB_PORT=6007).
tensorboard: $(STAMP)
	$(BIN)/tensorboard --logdir runs --host 127.0.0.1 --port $(TB_PORT)

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
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1 \
	    $(BIN)/python tools/regenerate.py notebooks/*.ipynb

clean-venv:
	rm -rf $(VENV)
