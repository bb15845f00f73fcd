# Two commands: `make run [PORT=7870] [HOST=0.0.0.0]` (app; uses the Hub when reachable) and `make test` (tests,
# offline). Both create .venv when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-real-dims test-torch211 setup browser

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

# PORT and HOST left unset: app.py's own defaults (GRADIO_SERVER_PORT or 7860; 127.0.0.1).
run: $(STAMP)
	$(PY) app.py $(if $(PORT),--port $(PORT)) $(if $(HOST),--host $(HOST))

test: $(STAMP) browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# Real-width models with 1 decoder layer (~9.5 GB RAM, ~5 CPU-minutes): not part of `make test`.
test-real-dims: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m real_dims tests/test_real_dims.py

# The ZeroGPU runtime (the Space's requirements from `python -m scripts.deploy_space --print-requirements zero-a10g`:
# torch 2.11.0, torchvision 0.26.0; Python 3.12) in a second venv, plus spaces and the test pins, then the lossless,
# ZeroGPU and app tests: `make test-torch211 [TORCH211_PYTHON=/path/to/python3.12]`. Downloads the CUDA build of
# torch (several GB); not part of `make test`.
TORCH211_VENV ?= .venv-torch211
TORCH211_PYTHON ?= python3.12
TORCH211_PY := $(TORCH211_VENV)/bin/python
TORCH211_TESTS ?= tests/test_engine.py tests/test_fastdraft.py tests/test_bundled_model.py tests/test_sampling.py \
	tests/test_divergence.py tests/test_padded_vocab.py tests/test_qwen3_vl.py tests/test_smolvlm.py \
	tests/test_zerogpu.py $(wildcard tests/test_app_*.py)

$(TORCH211_VENV)/.installed: requirements.txt requirements-dev.txt scripts/deploy_space.py
	test -x $(TORCH211_PY) || $(TORCH211_PYTHON) -m venv $(TORCH211_VENV)
	$(TORCH211_PY) -m scripts.deploy_space --print-requirements zero-a10g > $(TORCH211_VENV)/requirements.txt
	grep '^spaces==' requirements.txt >> $(TORCH211_VENV)/requirements.txt
	grep -v '^-r ' requirements-dev.txt > $(TORCH211_VENV)/requirements-dev.txt
	$(TORCH211_PY) -m pip install --quiet -r $(TORCH211_VENV)/requirements.txt -r $(TORCH211_VENV)/requirements-dev.txt
	touch $@

test-torch211: $(TORCH211_VENV)/.installed
	$(TORCH211_PY) -c "import sys, torch, torchvision; print(sys.version.split()[0], torch.__version__, torchvision.__version__)"
	HF_HUB_OFFLINE=1 $(TORCH211_PY) -m pytest -q -p no:cacheprovider $(TORCH211_TESTS)
