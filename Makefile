# The two commands a newcomer needs: `make up` (the whole system on embedded defaults) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: install up down status test test-fast browser eval bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, pinned: pip takes the CPU wheel on this machine instead of a multi-GB CUDA build
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $@

install: $(VENV)/.installed

up: install
	$(BIN)/regs up

down: install
	$(BIN)/regs down

status: install
	$(BIN)/regs status

# Debian's Chromium + ChromeDriver for the web page test (needs root; the test skips, saying why, without them)
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = "0" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "install chromium and chromium-driver to run the browser test"; fi; fi

test: install browser
	$(BIN)/pytest -q

test-fast: install
	$(BIN)/pytest -q -m "not slow and not browser"

eval: install
	$(BIN)/regs eval --config eval/configs/hybrid.yaml

bench: install
	$(BIN)/regs bench all

clean:
	rm -rf $(VENV) .regs .pytest_cache
