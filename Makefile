# Each target makes its own virtual environment on first use: only python3 is needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo needs only the package and its `demo` extra, in a light venv of its own.
DEMO_VENV  := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed
# The oldest versions we claim to support (the lower bounds in pyproject.toml), in their own venv.
LOWEST       := .venv-lowest
LOWEST_STAMP := $(LOWEST)/.installed
# What tests/core and tests/graph import (the whole test group pulls in httpx2, whose floor is
# above ours).
LOWEST_TEST  := pytest pytest-timeout hypothesis langchain langchain-openai starlette uvicorn \
	langgraph-checkpoint-sqlite langgraph-checkpoint-postgres 'psycopg[binary]'

# The package alone, no extra: what needs an extra must say which (tests/test_extras.py).
BARE         := .venv-bare
BARE_STAMP   := $(BARE)/.installed

# LangGraph's own test suite (from its sdist) with the test tools it needs, in its own venv.
SUITE        := .venv-suite
SUITE_STAMP  := $(SUITE)/.installed
SUITE_TEST   := pytest pytest-mock pytest-timeout syrupy 'pytest-xdist[psutil]' pytest-repeat \
	pytest-dotenv redis pycryptodome xxhash requests uvloop langgraph-sdk langgraph-prebuilt \
	langgraph-checkpoint-sqlite langgraph-checkpoint-postgres 'psycopg[binary]' psycopg-pool

# The LangGraph Agent Server on many workers (`langhost`, the open PostgreSQL + Redis runtime),
# for tests/wire/test_agent_server.py: it pins a langgraph-api older than `langgraph dev`'s.
SERVER       := .venv-server
SERVER_STAMP := $(SERVER)/.installed
SERVER_PINS  := langhost==0.11.1.post1 langgraph-runtime-pg==0.11.1.post1 langgraph-api==0.11.1

# LangChain's own agent tests (from its sdist) with the test tools they need, in their own venv.
AGENTS       := .venv-agents
AGENTS_STAMP := $(AGENTS)/.installed
AGENTS_TEST  := pytest pytest-timeout 'pytest-xdist[psutil]' pytest-asyncio pytest-socket \
	pytest-mock syrupy toml blockbuster langchain-tests langchain-openai vcrpy

.PHONY: demo test test-lowest test-bare suite agents-suite lint docs bench clean

$(STAMP): pyproject.toml
	@echo "First run: installing the package and the development tools in $(VENV)/ (a few minutes, once)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	@echo "First run: installing the package and its demo extra in $(DEMO_VENV)/ (about 30 s, once)..."
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/langgraph-deadline demo

# The tests run on two workers, a file per worker at a time: most of their time is spent waiting
# on deadlines and loopback servers, not on the CPU, and a file's tests share its fixtures. Those
# marked `serial` (a learned streaming rate that another worker's load would stretch) run alone
# after them. The notebooks run in a pytest of their own: their kernels then do not share the
# machine with what the whole suite leaves alive in its process (servers, threads, clients).
# The serial phase prints plain tracebacks: pytest's long ones parse source with `ast`, which on
# CPython 3.11.7 can race a thread the tests leave running and end the run in an INTERNALERROR
# that hides which test failed.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not serial" tests
	$(BIN)/python -m pytest -q --tb=native -m serial tests
	$(BIN)/python -m pytest -q notebooks

$(LOWEST_STAMP): pyproject.toml scripts/lowest-constraints.txt
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade pip
	$(LOWEST)/bin/python -m pip install --quiet -c scripts/lowest-constraints.txt -e . $(LOWEST_TEST)
	touch $(LOWEST_STAMP)

# The core and graph tests against the lowest supported langgraph, langchain-core, anyio, httpx.
test-lowest: $(LOWEST_STAMP)
	$(LOWEST)/bin/python -m pip freeze | grep -iE '^(langgraph|langchain-core|anyio|httpx|typing.extensions)=='
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider -o addopts="-ra --strict-markers" tests/core tests/graph

$(BARE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BARE)
	$(BARE)/bin/python -m pip install --quiet --upgrade pip
	$(BARE)/bin/python -m pip install --quiet -e . pytest
	touch $(BARE_STAMP)

# After `pip install langgraph-deadline` (no extras): the demo, the agents module, the
# observers each name the extra they need instead of a bare ModuleNotFoundError.
test-bare: $(BARE_STAMP)
	$(BARE)/bin/python -m pytest -q -p no:cacheprovider --noconftest -o addopts="" tests/test_extras.py

$(SUITE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SUITE)
	$(SUITE)/bin/python -m pip install --quiet --upgrade pip
	$(SUITE)/bin/python -m pip install --quiet -e . $(SUITE_TEST)
	touch $(SUITE_STAMP)

$(SERVER_STAMP): pyproject.toml
	@echo "First run: installing the Agent Server (langhost) and the package in $(SERVER)/ (about 1 min, once)..."
	$(PYTHON) -m venv $(SERVER)
	$(SERVER)/bin/python -m pip install --quiet --upgrade pip
	$(SERVER)/bin/python -m pip install --quiet -e . $(SERVER_PINS)
	touch $(SERVER_STAMP)

# LangGraph's own tests, plain and with every graph wrapped by with_deadlines (a deadline nobody
# reaches): fails on any test that passes plain and fails wrapped, but for the allowlist's.
suite: $(SUITE_STAMP)
	$(SUITE)/bin/python scripts/langgraph_suite/run.py

$(AGENTS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(AGENTS)
	$(AGENTS)/bin/python -m pip install --quiet --upgrade pip
	$(AGENTS)/bin/python -m pip install --quiet -e '.[agents]' $(AGENTS_TEST)
	touch $(AGENTS_STAMP)

# LangChain's own agent tests, plain and with DeadlineMiddleware in every create_agent (listed
# first, last, and first under with_deadlines), and under with_deadlines alone (a deadline nobody
# reaches): fails on any test that passes plain and fails in a mode, but for the allowlist's.
agents-suite: $(AGENTS_STAMP)
	$(AGENTS)/bin/python scripts/agents_suite/run.py

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The hedge benchmark runs the hedging libraries on PyPI beside ours: the `bench` group.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --group bench
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(LOWEST) $(BARE) $(SUITE) $(SERVER) $(AGENTS) .suite .pytest_cache .mypy_cache .ruff_cache .hypothesis
