# Thin wrappers; everything real lives in pyproject.toml, lib/seqlab and autograder/.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Optional torch requirement used only when no torch is importable yet, e.g.
#   make setup TORCH="torch==2.13.0"                      (a CPU wheel you already have)
#   make setup TORCH="torch --index-url https://download.pytorch.org/whl/cpu"
TORCH  ?=
NOTEBOOKS ?=
# Processes `make test` runs the tests in (tests/conftest.py keeps each module in one).
TEST_WORKERS ?= 2

.PHONY: setup lab test course site release grade selftest clean

setup: $(VENV)/.installed

# Re-runs only when pyproject.toml changes; an existing venv and torch are reused.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "torch already installed: $$($(BIN)/python -c 'import torch; print(torch.__version__)')"; \
	elif [ -n "$(TORCH)" ]; then \
		$(BIN)/python -m pip install $(TORCH); \
	fi
	$(BIN)/python -m pip install -q -e ".[dev]"
	@command -v bwrap >/dev/null || echo "note: bubblewrap is missing; grading student code needs" \
		"it (sudo apt-get install bubblewrap)"
	touch $@

# Containers often run as root, which Jupyter refuses unless told. Formgrader works inside a
# graded course (OUT/course of `make grade`), not at the repository root: say where they are.
lab: setup
	@for db in $$(ls -d */course/gradebook.db 2>/dev/null); do \
		echo "formgrader: a graded course is in $$(dirname $$db); open it with" \
			"make lab LAB_ARGS=--notebook-dir=$$(dirname $$db)"; done
	$(BIN)/jupyter lab --notebook-dir=. $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

# Execute every lecture headless: `make course` (FAST) or `make course FULL=1` (GPU-sized).
course: setup
	$(BIN)/python -m seqlab.course $(if $(FULL),--full) --out executed $(NOTEBOOKS)

# The course as a static HTML book, from the lectures as executed (FAST here; FULL=1 on a GPU
# is what a lecturer publishes): make site [OUT=site/] [FULL=1]. NOTEBOOKS=... runs only those
# again and reuses the other runs in executed/. Preview: python -m http.server --directory site
site: setup
	$(BIN)/python -m seqlab.course $(if $(FULL),--full) --out executed $(NOTEBOOKS)
	$(BIN)/python -m autograder book --executed executed --out $(or $(OUT),site)

# Instructors: make release A=01_language_models OUT=release/
#              make grade A=01_language_models SUBMISSIONS=submissions.zip OUT=graded/ ARGS="--workers 4"
release: setup
	$(BIN)/python -m autograder release $(A) --out $(OUT)

grade: setup
	$(BIN)/python -m autograder grade $(A) --submissions $(SUBMISSIONS) --out $(OUT) $(ARGS)

selftest: setup
	$(BIN)/python -m autograder selftest $(A)

clean:
	rm -rf executed results site .pytest_cache .ruff_cache
