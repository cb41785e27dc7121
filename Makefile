# nexopoll — `make run` starts the whole stack locally; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REDIS_URL ?= redis://127.0.0.1:6379/0
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
export REDIS_URL

.PHONY: run test test-pg venv redis-bin redis migrate reload lint bench clean

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

# redis-server must exist (tests start their own on random ports).
redis-bin:
	@command -v redis-server >/dev/null || { echo "installing redis-server (apt-get)"; \
	  apt-get update -qq && apt-get install -y -qq redis-server; }

# Use the Redis at REDIS_URL, or start one with its data under data/.
redis: venv redis-bin
	@mkdir -p data
	@if $(PY) -c "import redis,os; redis.Redis.from_url(os.environ['REDIS_URL']).ping()" 2>/dev/null; then \
	  echo "redis: using $(REDIS_URL)"; \
	else \
	  port=$$($(PY) -c "import os,urllib.parse as u; print(u.urlsplit(os.environ['REDIS_URL']).port or 6379)"); \
	  echo "redis: starting redis-server on port $$port (data in data/)"; \
	  redis-server --daemonize yes --bind 127.0.0.1 --port $$port --dir $(CURDIR)/data \
	    --appendonly yes --appendfsync everysec --logfile $(CURDIR)/data/redis.log \
	    --pidfile $(CURDIR)/data/redis.pid; \
	  for i in $$(seq 50); do redis-cli -p $$port ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	fi

migrate: venv
	@mkdir -p data
	$(PY) manage.py migrate --noinput -v 0

reload: migrate
	$(PY) manage.py pollers reload

run: venv redis migrate reload
	$(VENV)/bin/honcho start -f Procfile web worker beat

test: venv redis-bin
	$(PY) -m pytest -q -p no:cacheprovider

# The DB suite (runtime and integration tests: everything that touches the DB,
# Celery workers included) on PostgreSQL.
test-pg: venv redis-bin
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider tests/runtime tests/integration

lint: venv
	$(VENV)/bin/ruff check .

bench: venv redis-bin
	$(PY) -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data build *.egg-info
