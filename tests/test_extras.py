"""Optional dependencies (pyproject's extras) are imported where they are used: without one,
the rest loads, and the part that needs it fails saying which extra to install. A missing
package is simulated in a subprocess by a ``None`` entry in ``sys.modules``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from nexopoll.core.extras import MissingExtra, require
from tests.support.procs import ROOT


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**_base_env(), **env},
    )


def _base_env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "nexopoll.settings"}


def test_require_names_the_extra_and_passes_other_import_errors(tmp_path, monkeypatch):
    assert require("json", "x", "y").dumps([]) == "[]"
    with pytest.raises(
        MissingExtra,
        match=r"^the thing: nonexistent_pkg_q is not installed; "
        r"pip install 'nexopoll\[extra\]'$",
    ):
        require("nonexistent_pkg_q.sub", "extra", "the thing")
    # an installed package whose own import fails (a broken install) is not a missing extra
    (tmp_path / "brokenpkg_q").mkdir()
    (tmp_path / "brokenpkg_q" / "__init__.py").write_text("import nonexistent_dep_q\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as raised:
        require("brokenpkg_q", "extra", "the thing")
    assert not isinstance(raised.value, MissingExtra) and raised.value.name == "nonexistent_dep_q"


def test_the_google_pollers_load_without_google_auth_and_their_ticks_name_the_extra(tmp_path):
    token = tmp_path / "token.json"
    token.write_text('{"refresh_token": "r", "client_id": "c", "client_secret": "s"}')
    done = _python(f"""
        import sys
        sys.modules["google"] = None  # google-auth is not installed
        import pollers, pollers.gmail, pollers.google_calendar
        from pollers import _google
        from nexopoll.core.errors import PermanentError
        binding = _google.GoogleBinding.from_credentials({{"token_path": {str(token)!r}}})
        try:
            _google.auth_client(binding).access_token()
        except PermanentError as exc:
            print("PermanentError:", exc)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "PermanentError: the gmail and google_calendar pollers: google-auth is not installed; "
        "pip install 'nexopoll[google]'"
    )


def test_nexopoll_mcp_without_mcp_names_the_extra(tmp_path):
    done = _python(
        """
        import sys
        sys.modules["mcp"] = None
        from nexopoll.cli import main
        main(["mcp"])
    """,
        NEXOPOLL_CONFIG=str(tmp_path / "none.yaml"),
    )
    assert done.returncode == 1
    assert "nexopoll mcp: mcp is not installed; pip install 'nexopoll[mcp]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_postgres_url_without_psycopg_names_the_extra():
    done = _python(
        """
        import sys
        sys.modules["psycopg"] = None
        import django
        django.setup()
    """,
        DATABASE_URL="postgres://u@127.0.0.1:1/db",
    )
    assert done.returncode == 1
    assert "psycopg is not installed; pip install 'nexopoll[postgres]'" in done.stderr


def test_all_is_every_optional_part_and_make_venv_installs_it():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    parts = ("postgres", "google", "mcp", "flower", "legacy")
    assert sorted(extras["all"]) == sorted(r for p in parts for r in extras[p])
    hard = " ".join(project["dependencies"]).lower()
    for name in ("psycopg", "google-auth", "mcp", "flower", "ruamel", "honcho"):
        assert name not in hard, f"{name} is optional (an extra), not a dependency"
    assert any(r.startswith("honcho") for r in extras["dev"])  # `make run` starts honcho
    assert "pip install -q -e '.[dev,all]'" in (ROOT / "Makefile").read_text()
