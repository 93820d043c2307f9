# The two entry points of the project. Each creates (or reuses) the local virtual environment .venv.
#   make book   execute every chapter and build the site into _build/html/index.html
#   make test   unit/property/parity tests, every notebook under nbval, and a strict site build

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum requirements.txt pyproject.toml | cksum | cut -d' ' -f1)

# Trained weights are cached inside the checkout, so that the test run and the site build share them
# and a fresh clone starts from nothing.
export POSENC_CACHE_DIR := $(CURDIR)/.cache/posenc
export PYTHONHASHSEED := 0

.PHONY: book test pytest notebooks strict-book clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $@

book: $(STAMP)
	$(BIN)/jupyter-book build .
	@echo "Open _build/html/index.html"

test: pytest notebooks strict-book

pytest: $(STAMP)
	$(BIN)/python -m pytest tests/

# Two workers on the 2-core CI machine: one OpenMP thread each, or torch's thread pools fight over
# the cores and training slows down many times over.
notebooks: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest --nbval-lax --nbval-current-env -n 2 --dist loadfile book/

strict-book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going

clean:
	rm -rf _build .cache
