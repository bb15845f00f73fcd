# Two commands: `make run` (app; uses the Hub when reachable) and `make test` (tests, offline). Both create .venv when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-real-dims setup browser

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

# Debian chromium for the real-browser test (never the Playwright browser download); optional.
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium could not be installed: the browser test will be skipped"

run: $(STAMP)
	$(PY) app.py

test: $(STAMP) browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# Real-width models with 1 decoder layer (~9.5 GB RAM, ~5 CPU-minutes): not part of `make test`.
test-real-dims: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m real_dims tests/test_real_dims.py
