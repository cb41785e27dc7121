"""A pollers.yaml sized for many jobs (issue 6): past 10,000 jobs and past 2 MiB it is
read whole and loaded; past the caps it is refused by size, before parsing."""

from __future__ import annotations

import time

import yaml
from django.utils import timezone

from nexopoll import services
from nexopoll.core.config import ConfigFileError
from nexopoll.core.yamlsrc import MAX_BYTES

from .conftest import scripted


def test_fifteen_thousand_jobs_over_two_mib_load(tmp_path):
    jobs = [scripted(f"job-{i:06d}-{'x' * 40}") for i in range(15_000)]
    doc = {"pollers": {"jobs": jobs}, "agents": {"ana": {"log": {}}}}
    path = tmp_path / "pollers.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert path.stat().st_size > 2 * 1024 * 1024
    started = time.monotonic()
    loaded = services.load_file(now=timezone.now(), path=path)
    assert len(loaded.jobs) == 15_000 and not loaded.issues
    assert time.monotonic() - started < 30


def test_a_file_past_the_size_cap_is_refused_by_size_without_reading_it_whole(tmp_path):
    path = tmp_path / "pollers.yaml"
    with path.open("wb") as fh:
        fh.write(b"pollers:\n  jobs: []\n#")
        fh.seek(MAX_BYTES + 10 * 1024 * 1024)
        fh.write(b"\n")
    try:
        services.load_file(now=timezone.now(), path=path)
    except ConfigFileError as exc:
        assert f"larger than {MAX_BYTES} bytes" in str(exc)
    else:
        raise AssertionError("a file past the cap was accepted")
