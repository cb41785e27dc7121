"""The operator's day in headless Chromium: every page is reached by clicking the links
an operator clicks, from /admin/ on, with job ids that use every allowed character
(``_`` ``.`` ``-`` and digits), so the admin's quoting (``_`` → ``_5F``) is on the path.

No worker or beat here: ticks run in the test process (real Redis, the test DB), and
the live server serves the admin."""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from nexopoll.models import PollJob, PollState
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import Config, scripted
from tests.support.outbox import outbox_row

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser]
DOCS = Path(__file__).resolve().parent.parent.parent / "docs"
FEED = "feed_1.news-eu"  # every character a job id may use besides lowercase letters
DEMO = "demo_items"
STAMP = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Z]{3,4}"  # 2026-11-26 14:18:03 UTC
MINUTE = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} [A-Z]{3,4}"  # the jobs list: 2026-11-26 15:18 CET


@pytest.fixture
def cfg(tmp_path, redis_client, transactional_db, settings) -> Config:
    settings.NEXOPOLL_CONFIG = str(tmp_path / "pollers.yaml")
    return Config(tmp_path / "pollers.yaml")


@pytest.fixture
def jobs(cfg, redis_client):
    """Five jobs: FEED ticked twice (two deliveries), DEMO failing, one paused, one with
    its breaker open after three failures, one with a long id, ticking fine."""
    cfg.write(
        [
            scripted(FEED, schedule={"cron": "0 */15 6-22 * * mon-fri", "tz": "Europe/Berlin"}),
            scripted(DEMO, every=300),
            scripted("mail-2.ops_x", every=60, paused_on_boot=True),
            scripted("imap_4.support-desk", every=120),
            scripted("rss-3.world_news.headlines-2026", every=600),
        ]
    )
    cfg.reload()
    redis_client.rpush("test:src:rss-3.world_news.headlines-2026", *range(1, 13))
    tick_job("rss-3.world_news.headlines-2026", now=timezone.now())
    redis_client.set("test:mode:imap_4.support-desk", "transient")
    for _ in range(3):
        tick_job("imap_4.support-desk", now=timezone.now())
    PollState.objects.filter(job_id="imap_4.support-desk").update(
        breaker_open_until=timezone.now() + timedelta(minutes=5)
    )
    redis_client.rpush(f"test:src:{FEED}", 1)
    tick_job(FEED, now=timezone.now())
    redis_client.rpush(f"test:src:{FEED}", 2)
    tick_job(FEED, now=timezone.now())
    redis_client.set(f"test:mode:{DEMO}", "transient")
    tick_job(DEMO, now=timezone.now())
    return cfg


@pytest.fixture
def window(browser):
    """The browser at an operator's 1400 px, back to the suite's size afterwards."""
    size = browser.get_window_size()
    browser.set_window_size(1400, 1000)
    yield browser
    browser.set_window_size(size["width"], size["height"])


def operator() -> User:
    user = User.objects.create_user("op", password="pw-op-1", is_staff=True)
    for codename in ("view_job", "operate_job", "view_outboxrow", "redeliver"):
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="admin_ext")
        )
    return user


def wait_text(driver, text: str) -> None:
    WebDriverWait(driver, 20).until(lambda d: text in d.page_source, message=text)


def click(driver, by: str, what: str) -> None:
    driver.find_element(by, what).click()


def to_jobs_list(driver, live_server) -> None:
    """Log in at /admin/ and click the "Jobs" link of the app list."""
    driver.delete_all_cookies()
    driver.get(f"{live_server.url}/admin/")
    driver.find_element(By.NAME, "username").send_keys("op")
    driver.find_element(By.NAME, "password").send_keys("pw-op-1")
    click(driver, By.CSS_SELECTOR, "input[type=submit]")
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "nexopoll-summary"))
    click(driver, By.CSS_SELECTOR, "#content-main tr.model-job th a")
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "result_list"))


def row_of(driver, job_id: str):
    return driver.find_element(
        By.XPATH, f"//table[@id='result_list']//tr[.//input[@value='{job_id}']]"
    )


def to_job_page(driver, job_id: str) -> None:
    link = row_of(driver, job_id).find_element(By.CSS_SELECTOR, "th a")
    assert link.text == job_id
    link.click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "job-state"))


def one_line(driver, element) -> bool:
    """An inline element is on one line when the browser lays it out as one box."""
    return driver.execute_script("return arguments[0].getClientRects().length", element) == 1


def test_click_through_job_pages_and_actions_with_every_id_character(
    browser, live_server, jobs, redis_client
):
    operator()
    to_jobs_list(browser, live_server)
    href = row_of(browser, FEED).find_element(By.CSS_SELECTOR, "th a").get_attribute("href")
    assert "/feed_5F1.news-eu/change/" in href  # Django quotes "_" in its links
    to_job_page(browser, FEED)
    assert f"Job {FEED}" in browser.title
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.np-tick")) == 2
    assert browser.find_element(By.ID, "job-status").text == "ok"
    assert "never fires again" not in browser.find_element(By.ID, "job-preview").text
    assert "2" in browser.find_element(By.ID, "job-cursor").text
    deliveries = browser.find_elements(By.CSS_SELECTOR, "#job-deliveries tr.np-delivery")
    assert len(deliveries) == 2

    # the history (admin log) view and back
    click(browser, By.CSS_SELECTOR, "#job-links a.historylink")
    WebDriverWait(browser, 20).until(lambda d: FEED in d.title)
    assert "history" in browser.title.lower()
    browser.back()

    # pause and resume by the job page's buttons: the message names the job as written
    click(browser, By.CSS_SELECTOR, "input[name=pause]")
    wait_text(browser, f"Paused {FEED}.")
    assert PollState.objects.get(job_id=FEED).paused
    assert "yes" in browser.find_element(By.ID, "job-paused").text
    click(browser, By.CSS_SELECTOR, "input[name=resume]")
    wait_text(browser, f"Resumed {FEED}.")
    assert not PollState.objects.get(job_id=FEED).paused

    # rewind from the history table: cancel once, then confirm
    rewind = "//tr[@class='np-tick'][td[1]='2']//a[text()='rewind here']"
    click(browser, By.XPATH, rewind)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "confirm-rewind"))
    click(browser, By.CSS_SELECTOR, "a.cancel-link")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "job-state"))
    assert bytes(PollState.objects.get(job_id=FEED).cursor) == b"2"
    click(browser, By.XPATH, rewind)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "confirm-rewind"))
    click(browser, By.ID, "confirm-rewind")
    wait_text(browser, f"Job {FEED}: cursor rewound to tick #2.")
    assert bytes(PollState.objects.get(job_id=FEED).cursor) == b"1"

    # run now from the job page (queued: no worker here, the message is what counts)
    click(browser, By.CSS_SELECTOR, "input[name=run]")
    wait_text(browser, f"Job {FEED}: run queued as task")

    # a delivery of the job: its short id links to its page
    first = browser.find_element(By.CSS_SELECTOR, "#job-deliveries tr.np-delivery a")
    full_id = first.get_attribute("title")
    assert first.text == full_id.replace("-", "")[:8]
    first.click()
    WebDriverWait(browser, 20).until(lambda d: full_id in d.page_source)
    assert re.search(STAMP, browser.find_element(By.ID, "content-main").text)
    browser.back()

    # the job's deliveries in the outbox list, then a delivery page from there
    click(browser, By.ID, "job-deliveries-link")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "result_list"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 2
    click(browser, By.CSS_SELECTOR, "#result_list tbody tr td.field-job_col a")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "job-state"))
    assert f"Job {FEED}" in browser.title

    # reset from the job page, through its confirmation
    click(browser, By.CSS_SELECTOR, "input[name=reset]")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "confirm-reset"))
    assert FEED in browser.find_element(By.ID, "reset-cursors").text
    click(browser, By.ID, "confirm-reset")
    wait_text(browser, f"Reset {FEED}: cursors cleared.")
    assert PollState.objects.get(job_id=FEED).cursor is None

    # the list's actions on several jobs name them, in their own case
    click(browser, By.CSS_SELECTOR, f"input[name=_selected_action][value='{FEED}']")
    click(browser, By.CSS_SELECTOR, f"input[name=_selected_action][value='{DEMO}']")
    Select(browser.find_element(By.NAME, "action")).select_by_value("pause")
    click(browser, By.CSS_SELECTOR, "button[name=index]")
    wait_text(browser, f"Paused {DEMO}, {FEED}.")
    assert PollState.objects.filter(job_id__in=[FEED, DEMO], paused=True).count() == 2
    shot = ARTIFACTS / "operator-clicks.png"
    browser.save_screenshot(str(shot))


def test_jobs_list_fits_1400px_and_reads_right(window, live_server, jobs):
    browser = window
    operator()
    # config/pollers.yaml's cron job, as the reload would store it (its kind is the widest)
    now = timezone.now()
    PollJob.objects.create(
        job_id="demo_cron",
        kind="webhook_poll",
        agent="demo",
        schedule={"cron": "*/20 * * * * *", "tz": "Europe/Paris"},
        config={},
        definition_hash="h",
    )
    PollState.objects.create(
        job_id="demo_cron",
        definition_hash="h",
        last_status="ok",
        last_run_at=now,
        next_run_at=now + timedelta(seconds=20),
        items_seen_total=123456,
        items_dispatched_total=98765,
    )
    to_jobs_list(browser, live_server)
    fits = browser.execute_script(
        "const r = document.querySelector('#changelist .results');"
        "return [r.scrollWidth, r.clientWidth, document.documentElement.scrollWidth,"
        " window.innerWidth];"
    )
    widths = browser.execute_script(
        "return [...document.querySelectorAll('#result_list thead th')].map("
        "h => h.className + ':' + Math.round(h.getBoundingClientRect().width))"
    )
    assert fits[0] <= fits[1] and fits[2] <= fits[3], f"horizontal scroll: {fits} {widths}"
    for col in ("last_run_col", "next_run_col", "seen_col", "dispatched_col"):
        right = browser.execute_script(
            "return document.querySelector('th.column-' + arguments[0])"
            ".getBoundingClientRect().right",
            col,
        )
        assert right <= fits[3], (col, right)
    for job_id in (FEED, DEMO, "demo_cron"):
        row = row_of(browser, job_id)
        assert one_line(browser, row.find_element(By.CSS_SELECTOR, "td.field-schedule_col span"))
        for col in ("last_run_col", "next_run_col"):
            cell = row.find_element(By.CSS_SELECTOR, f"td.field-{col} span")
            assert one_line(browser, cell) and re.fullmatch(MINUTE, cell.text), cell.text
    sched = row_of(browser, FEED).find_element(By.CSS_SELECTOR, "td.field-schedule_col span")
    assert sched.text == "cron 0 */15 6-22 * * mon-fri"
    assert sched.get_attribute("title") == "cron 0 */15 6-22 * * mon-fri (Europe/Berlin)"

    # paused: green for a running job, red for a paused one; never Django's red ✗ for running
    running = row_of(browser, FEED).find_element(By.CSS_SELECTOR, "td.field-paused_col")
    paused = row_of(browser, "mail-2.ops_x").find_element(By.CSS_SELECTOR, "td.field-paused_col")
    assert "running" in running.text and "paused" in paused.text
    assert not running.find_elements(By.CSS_SELECTOR, "img[src*='icon-no']")

    def rgb(el) -> tuple[int, ...]:
        css = el.find_element(By.CSS_SELECTOR, "span").value_of_css_property("color")
        return tuple(int(x) for x in re.findall(r"\d+", css)[:3])

    (r, g, _), (r2, g2, _) = rgb(running), rgb(paused)
    assert g > r and r2 > g2, (rgb(running), rgb(paused))
    picture = ARTIFACTS / "jobs-list-1400.png"
    browser.save_screenshot(str(picture))
    if os.environ.get("NEXOPOLL_DOCS_SCREENSHOT") == "1":  # refresh the README's picture
        shutil.copy(picture, DOCS / "admin-jobs.png")


def test_deliveries_list_newest_first_short_ids_iso_times(window, live_server, cfg):
    browser = window
    operator()
    cfg.write([scripted(FEED)])
    cfg.reload()
    now = timezone.now().replace(microsecond=0)
    rows = [
        outbox_row(
            FEED,
            at=now,
            channel="webhook",
            recipient="https://hooks.example.com/very/long/path",
            payload={"text": str(i)},
            status="sent",
            attempts=1,
            sent_at=now - timedelta(hours=i),
            created_at=now - timedelta(hours=i),
        )
        for i in (3, 1, 2)
    ]
    to_jobs_list(browser, live_server)
    click(browser, By.CSS_SELECTOR, "#breadcrumbs a, .breadcrumbs a")  # Home
    click(browser, By.CSS_SELECTOR, "#content-main tr.model-outboxrow th a")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "result_list"))
    ids = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#result_list .field-id_col")]
    newest = sorted(rows, key=lambda r: r.created_at, reverse=True)
    assert ids == [str(r.id).replace("-", "")[:8] for r in newest]
    for cell in browser.find_elements(By.CSS_SELECTOR, "#result_list .field-id_col code"):
        assert one_line(browser, cell)
    created = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-created_col span")
    assert [c.text for c in created] == [
        r.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") for r in newest
    ]
    assert all(one_line(browser, c) for c in created)
    assert "p.m." not in browser.page_source and "a.m." not in browser.page_source
    fits = browser.execute_script(
        "const r = document.querySelector('#changelist .results');"
        "return [r.scrollWidth, r.clientWidth];"
    )
    assert fits[0] <= fits[1], f"horizontal scroll: {fits}"
    # a short id as shown finds its row; clicking it opens the delivery's page
    box = browser.find_element(By.ID, "searchbar")
    box.send_keys(ids[1])
    box.submit()
    WebDriverWait(browser, 20).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 1
    )
    click(browser, By.CSS_SELECTOR, "#result_list .field-id_col a")
    WebDriverWait(browser, 20).until(lambda d: str(newest[1].id) in d.page_source)
