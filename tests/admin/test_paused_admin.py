"""The admin's jobs list: "paused" for a paused job's next run, its next slot once
resumed, and a poller's notice beside the last error."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from nexopoll import services
from nexopoll.runtime.tick import tick_job
from tests.runtime.test_notice import google, rebaselined  # noqa: F401  (fixture)

from .conftest import scripted

JOBS = "/admin/admin_ext/job/"


def page(user) -> str:
    c = Client()
    c.force_login(user)
    return c.get(JOBS).content.decode()


def next_run_cell(html: str, job_id: str) -> str:
    row = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*>{job_id}<(?:(?!</tr>).)*</tr>", html, re.S)
    assert row, job_id
    cell = re.search(r'<td class="field-next_run_col">(.*?)</td>', row.group(0), re.S)
    return cell.group(1)


def test_next_run_says_paused_then_the_next_slot(cfg, operator):
    cfg.write([scripted("alpha"), scripted("beta")])
    cfg.reload()
    tick_job("alpha", now=timezone.now() - timedelta(hours=1))  # next_run_at an hour old
    services.pause_job("alpha")
    assert next_run_cell(page(operator), "alpha") == "paused"
    services.resume_job("alpha")
    now = timezone.now()
    cell = next_run_cell(page(operator), "alpha")
    shown = re.search(r'title="([0-9-]+ [0-9:]+) UTC"', cell).group(1)
    assert now.strftime("%Y-%m-%d %H:%M:%S") <= shown  # the next slot, never in the past
    assert shown <= (now + timedelta(seconds=61)).strftime("%Y-%m-%d %H:%M:%S")


def test_a_pollers_notice_shows_beside_the_last_error(cfg, operator, google, tmp_path):  # noqa: F811
    state = rebaselined(cfg, google, tmp_path)
    html = page(operator)
    assert "410 Gone" in html and state.notice_at.strftime("%Y-%m-%d %H:%M") in html
    c = Client()
    c.force_login(operator)
    detail = c.get(JOBS + "cal/change/", follow=True).content.decode()
    assert 'id="job-notice"' in detail and "410 Gone" in detail
