# nexopoll — `make run` starts the whole stack locally; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REDIS_URL ?= redis://127.0.0.1:6379/0
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
PORT ?= 8000
# the demo jobs in config/pollers.yaml poll the web process (`make run` serves /demo/items)
NEXOPOLL_DEMO_BASE ?= http://127.0.0.1:$(PORT)
export REDIS_URL PORT NEXOPOLL_DEMO_BASE
# processes find gunicorn, celery and python on PATH (the Procfile names no venv path)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: browser-deps run stop test test-pg venv redis-bin redis migrate reload static flower-auth lint docs bench \
	clean rabbitmq-bin chaos chaos-smoke

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,all]'
	@touch $@

venv: $(VENV)/.installed

# redis-server must exist (tests start their own on random ports).
redis-bin:
	@command -v redis-server >/dev/null || { echo "installing redis-server (apt-get)"; \
	  apt-get update -qq && apt-get install -y -qq redis-server; }

# Use the Redis at REDIS_URL, or start one with its data under data/ (`make stop` stops it).
redis: venv
	@mkdir -p data
	@if $(PY) -c "import redis,os; redis.Redis.from_url(os.environ['REDIS_URL']).ping()" 2>/dev/null; then \
	  echo "redis: using $(REDIS_URL)"; \
	else \
	  $(MAKE) --no-print-directory redis-bin; \
	  port=$$($(PY) -c "import os,urllib.parse as u; print(u.urlsplit(os.environ['REDIS_URL']).port or 6379)"); \
	  echo "redis: starting redis-server on port $$port (data in data/; \`make stop\` stops it)"; \
	  redis-server --daemonize yes --bind 127.0.0.1 --port $$port --dir $(CURDIR)/data \
	    --appendonly yes --appendfsync everysec --logfile $(CURDIR)/data/redis.log \
	    --pidfile $(CURDIR)/data/redis.pid; \
	  for i in $$(seq 50); do redis-cli -p $$port ping >/dev/null 2>&1 && break; sleep 0.1; done; \
	fi

migrate: venv
	@mkdir -p data
	$(PY) manage.py migrate --noinput -v 0

# A pollers.yaml with errors does not stop `make run`: the valid jobs are applied, the
# rejected ones keep their last good definitions (`nexopoll reload` exits 1).
reload: migrate
	$(PY) manage.py pollers reload || echo "pollers.yaml has errors (above): not applied to those jobs"

static: venv
	@$(PY) manage.py collectstatic --noinput -v 0

# The web process refuses the built-in dev key: make one under data/ (kept across runs);
# `make run` uses it unless DJANGO_SECRET_KEY or DJANGO_SECRET_KEY_FILE is set.
data/secret_key:
	@mkdir -p data
	@umask 077 && $(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > $@

# Flower needs credentials: NEXOPOLL_FLOWER_BASIC_AUTH, or a password generated once under data/.
flower-auth:
	@mkdir -p data
	@if [ -z "$$NEXOPOLL_FLOWER_BASIC_AUTH" ] && [ ! -s data/flower-password ]; then \
	  $(PY) -c "import secrets; print(secrets.token_urlsafe(18))" > data/flower-password; \
	  chmod 600 data/flower-password; fi

run: venv redis migrate reload static flower-auth data/secret_key
	@if [ -z "$$NEXOPOLL_FLOWER_BASIC_AUTH" ]; then \
	  echo "flower: http://127.0.0.1:$${NEXOPOLL_FLOWER_PORT:-5555}  user admin, password in data/flower-password"; fi
	@echo "admin:  http://127.0.0.1:$(PORT)/admin/  (create a login: .venv/bin/nexopoll createsuperuser; source .venv/bin/activate puts nexopoll on PATH)"
	@echo "health: http://127.0.0.1:$(PORT)/healthz    stop everything: Ctrl-C, then make stop"
	@if [ -z "$$DJANGO_SECRET_KEY$$DJANGO_SECRET_KEY_FILE" ]; then \
	  export DJANGO_SECRET_KEY_FILE=$(CURDIR)/data/secret_key; fi; \
	NEXOPOLL_DEMO=1 \
	NEXOPOLL_FLOWER_BASIC_AUTH="$${NEXOPOLL_FLOWER_BASIC_AUTH:-admin:$$(cat data/flower-password 2>/dev/null)}" \
	  exec $(PY) -m nexopoll.devstack run data/run.pid -- honcho start -p $(PORT) -f Procfile web worker beat flower

# Stop what `make run` started, the redis-server it daemonised included; returns once
# every process has exited (nexopoll/devstack.py), so `make stop && make run` is safe.
stop:
	@$(PYTHON) -m nexopoll.devstack stop data/run.pid
	@if [ -s data/redis.pid ] && kill -0 $$(cat data/redis.pid) 2>/dev/null; then \
	  kill -TERM $$(cat data/redis.pid) && echo "stopped redis-server (pid $$(cat data/redis.pid))"; \
	  for i in $$(seq 50); do kill -0 $$(cat data/redis.pid) 2>/dev/null || break; sleep 0.1; done; \
	else echo "no redis-server started by make run is running"; fi

# Browser tests need Debian's chromium + chromium-driver (never a downloaded browser):
# installed here when apt can; otherwise those tests skip and say why.
browser-deps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { echo "installing chromium + chromium-driver (apt-get) for the browser tests"; \
	    (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 || \
	    echo "WARNING: could not install chromium: the browser tests will be SKIPPED"; }

# The example entry-point package (examples/) is installed so its tests and kind run.
example-packages: venv
	$(PY) -m pip install -q --no-deps ./examples/nexopoll-example-poller

test: venv redis-bin browser-deps example-packages
	$(PY) -m pytest -q -p no:cacheprovider

# The DB suite (runtime and integration tests: everything that touches the DB,
# Celery workers included) on PostgreSQL.
test-pg: venv redis-bin
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider tests/runtime tests/admin tests/integration \
	  tests/api tests/metrics tests/tools

# ruff, then the import contracts in pyproject.toml ([tool.importlinter]): nexopoll.core
# and pollers must not import Django, Celery, Redis, the runtime or the models; the
# layers (front-ends > services > runtime > pollers/channels > net > core) and the
# front-ends' independence.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .  # the formatter, not hand layout: no "fmt: skip" blocks
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m nexopoll.devtools.cycles  # no import cycle among nexopoll's modules
	$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link fails.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# BENCH_ARGS: --quick (about 2 min), --db postgres[://postgres@127.0.0.1:5432/PREFIX], --parts
bench: venv redis-bin
	@$(PY) -c "import matplotlib" 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.run $(BENCH_ARGS)

# RabbitMQ for the broker tests and the chaos run (each starts a private node).
rabbitmq-bin:
	@command -v rabbitmq-server >/dev/null || { echo "installing rabbitmq-server (apt-get)"; \
	  apt-get update -qq && apt-get install -y -qq rabbitmq-server; }

# The chaos run (docs/deploy.md): 1,000 jobs, each component killed in turn; exits 1 when an
# item was lost. About 5 min: nightly. CHAOS_ARGS: --jobs N --every S --faults a,b
chaos: venv redis-bin rabbitmq-bin
	$(PY) -m bench.chaos $(CHAOS_ARGS)

# Its smoke version (about 90 s, run by CI): 50 jobs, a worker and the broker killed.
chaos-smoke: venv redis-bin rabbitmq-bin
	$(PY) -m bench.chaos --jobs 50 --faults worker,broker

clean:
	rm -rf $(VENV) data build site *.egg-info
