# The README's quick start: `make demo` (compare the shipped NeRF teacher with its shipped EUGen student;
# DEMO_DISTILL=1 distils the student first) and `make test` (the default test suite). Both set up the environment first.
PY := .venv/bin/python

.PHONY: setup demo test test-slow bench scenes-setup

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

# Tests run on one pytest-xdist worker per core (at most 4: each holds torch and nerfstudio in memory);
# a file's tests stay on one worker, so its module fixtures are built once; the longest files go first
# (tests/conftest.py).
WORKERS := -n auto --maxprocesses 4
PARALLEL := $(WORKERS) --dist loadfile --no-loadscope-reorder

test:
	@bash scripts/setup.sh --test
	$(PY) -m pytest -p no:dash -q --durations=10 $(PARALLEL)

# The slow suite hands out tests one by one: its few long end-to-end tests then share both cores.
test-slow:  # also Blender and COLMAP: the slow suite's scene and capture tests run them
	@bash scripts/setup.sh --test --scenes
	$(PY) -m pytest -p no:dash -q -m slow $(WORKERS) --dist load

bench: setup
	.venv/bin/eugen-bench layers

# Blender and COLMAP (Debian packages), needed only to generate scenes (`eugen-scenes blender ...`, the photo
# capture); demo and test never need them.
scenes-setup:
	@bash scripts/setup.sh --scenes
