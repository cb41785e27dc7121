"""The docs tell the truth about the code: every environment variable the code reads is in
docs/configuration.md's tables, and every relative link of README.md and docs/*.md points at
a file (and heading) that exists. ``make docs`` (``mkdocs build --strict``) checks the site."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("nexopoll", "pollers", "admin_ext")
NAME = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PORT"
# env_str("X", …), env_secret("X"), os.environ.get("X"), os.environ["X"], os.getenv("X"),
# env.get("X") on a copy of the environment, api_base("X", …) (the channels' API bases)
READS = re.compile(
    rf"""(?:\benv_(?:str|int|float|bool|secret)|\bgetenv|environ\.get|\benv\.get|\bapi_base"""
    rf"""|environ\.setdefault)\(\s*["']({NAME})["']|environ\[["']({NAME})["']\]"""
)
# a name held in a constant first: GMAIL_BASE_ENV = "NEXOPOLL_GMAIL_API_BASE"
CONSTANT = re.compile(rf"""^\w*ENV\w*\s*=\s*["']({NAME})["']""", re.M)
SECRET = re.compile(rf"""\benv_secret\(\s*["']({NAME})["']""")
SHELL = re.compile(rf"\$\{{({NAME}):-")  # ${X:-default} in the Procfile


def variables_read() -> set[str]:
    found: set[str] = set()
    files = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")]
    for path in files:
        text = path.read_text()
        found |= {a or b for a, b in READS.findall(text)}
        found |= set(CONSTANT.findall(text))
        found |= {f"{n}_FILE" for n in SECRET.findall(text)}  # env_secret reads NAME_FILE too
    found |= set(SHELL.findall((ROOT / "Procfile").read_text()))
    return found


def documented_variables() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text[text.index("## Environment variables") :]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names |= set(re.findall(rf"`({NAME})`", first_cell))
    return names


def test_the_scan_finds_the_readers_it_is_meant_to_find():
    found = variables_read()
    for name in (
        "DATABASE_URL",
        "NEXOPOLL_VISIBILITY_TIMEOUT",
        "NEXOPOLL_SLACK_API_BASE",
        "NEXOPOLL_GMAIL_API_BASE",
        "NEXOPOLL_FLOWER_BASIC_AUTH",
        "DJANGO_SECRET_KEY_FILE",
        "NEXOPOLL_WORKER_THREADS",
    ):
        assert name in found, name


def test_every_environment_variable_the_code_reads_is_documented():
    missing = sorted(variables_read() - documented_variables())
    assert not missing, f"add these to docs/configuration.md's environment tables: {missing}"


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (mkdocs) gives a heading."""
    text = re.sub(r"[`*_\[\]]", "", heading.strip()).lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(path: Path) -> set[str]:
    anchors, fence = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.+)", line)):
            anchors.add(_slug(m.group(1)))
    return anchors


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_an_existing_file_and_heading(path):
    broken = []
    for link in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        dest = (path.parent / target).resolve() if target else path
        if not dest.exists():
            broken.append(f"{link}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{link}: no heading #{anchor} in {dest.relative_to(ROOT)}")
        elif "shared" in dest.relative_to(ROOT).parts[:1] or not dest.is_relative_to(ROOT):
            broken.append(f"{link}: outside the repository")
    assert not broken, "\n".join(broken)


def test_the_docs_site_builds_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_fault_matrix_has_rows_1_to_60_each_naming_its_tests_or_saying_not_covered():
    text = (ROOT / "docs" / "reliability.md").read_text()
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", text, re.M)}
    assert sorted(rows) == list(range(1, 61))
    for number, row in rows.items():
        tests = re.findall(r"`(tests/[\w/]+\.py)`", row)
        assert tests or "*not covered*" in row, f"row {number} names no test: {row}"
        for path in tests:
            assert (ROOT / path).is_file(), f"row {number}: {path} does not exist"


def test_the_readme_pollers_yaml_loads_with_the_real_validators():
    from datetime import UTC, datetime

    from nexopoll.channels import binding_schemas
    from nexopoll.core.config import load_config
    from nexopoll.runtime.registry import get_registry

    [doc] = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    env = {"JIRA_TOKEN": "t" * 12, "ANA_HOOK_SECRET": "s" * 12}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    validators, channels = get_registry().validators(), binding_schemas()
    cfg = load_config(
        doc, source="README.md", env=env, now=now, validators=validators, channels=channels
    )
    assert cfg.issues == [] and list(cfg.jobs) == ["jira_assigned"]


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_use_the_nexopoll_command_not_manage_py(path):
    blocks = re.findall(r"```(?:sh|console|bash)?\n(.*?)```", path.read_text(), re.S)
    offenders = [line for b in blocks for line in b.splitlines() if "manage.py" in line]
    assert not offenders, offenders


def test_the_readme_stays_an_overview():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for page in (
        "configuration",
        "operating",
        "pollers",
        "channels",
        "plugins",
        "security",
        "reliability",
        "testing",
        "performance",
        "architecture",
    ):
        assert f"(docs/{page}.md)" in readme, page
    assert "make run" in readme and "make test" in readme and "about 15 minutes" in readme
