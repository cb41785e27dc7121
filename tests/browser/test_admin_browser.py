"""The admin in headless Chromium against a live server, a real worker, beat and Redis.

Pages are reached by clicking from /admin/, and the job ids use ``_`` ``.`` ``-`` and
digits, so every link goes through the admin's quoting (``_`` reads ``_5F``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from nexopoll.models import Delivery, PollJob, PollState
from tests.integration.conftest import job
from tests.support.outbox import outbox_row
from tests.support.procs import wait_for

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.integration]
DOCS = Path(__file__).resolve().parent.parent.parent / "docs"
ALPHA, BETA = "alpha_1.feed-eu", "beta_2.feed-us"


def make_user(name: str, *perms: str, superuser: bool = False) -> User:
    user = User.objects.create_user(
        name, password=f"pw-{name}-1", is_staff=True, is_superuser=superuser
    )
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="admin_ext")
        )
    return user


def login(driver, live_server, name: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{live_server.url}/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(f"pw-{name}-1")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, 20).until(lambda d: "nexopoll-summary" in d.page_source)


def jobs_page(driver) -> None:
    """From the index (where login lands), the app list's "Jobs" link."""
    driver.find_element(By.CSS_SELECTOR, ".breadcrumbs a, #site-name a").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "nexopoll-summary"))
    driver.find_element(By.CSS_SELECTOR, "#content-main tr.model-job th a").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "result_list"))


def job_page(driver, job_id: str) -> None:
    """The jobs list, then the job's link in its row."""
    jobs_page(driver)
    driver.find_element(By.XPATH, f"//table[@id='result_list']//th/a[text()='{job_id}']").click()
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "job-state"))


def run_action(driver, action: str, *job_ids: str) -> None:
    for job_id in job_ids:
        driver.find_element(
            By.CSS_SELECTOR, f"input[name=_selected_action][value='{job_id}']"
        ).click()
    Select(driver.find_element(By.NAME, "action")).select_by_value(action)
    driver.find_element(By.CSS_SELECTOR, "button[name=index]").click()


def shot(driver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


@pytest.fixture
def running(stack):
    """Two scripted jobs ticking every second through a real beat and worker."""
    stack.write([job(ALPHA, every=1), job(BETA, every=1)])
    stack.reload()
    stack.publish(ALPHA, 1, 2)
    stack.worker()
    stack.beat()
    wait_for(lambda: stack.ticks(ALPHA) >= 1 and stack.ticks(BETA) >= 1, 60, what="ticks")
    return stack


def test_jobs_list_pause_and_it_stops_ticking(browser, live_server, running):
    make_user("root", superuser=True)
    login(browser, live_server, "root")
    wait_for(lambda: PollState.objects.get(job_id=ALPHA).last_status == "ok", 30)
    jobs_page(browser)
    page = browser.page_source
    assert ALPHA in page and BETA in page and "every 1 s" in page and "np-ok" in page
    shot(browser, "jobs-list")  # the README's picture: test_operator_clicks, at 1400 px
    run_action(browser, "pause", ALPHA)
    WebDriverWait(browser, 20).until(lambda d: f"Paused {ALPHA}." in d.page_source)
    assert PollState.objects.get(job_id=ALPHA).paused
    after = running.ticks(ALPHA)
    beta = running.ticks(BETA)
    wait_for(lambda: running.ticks(BETA) >= beta + 3, 30, what="three more slots of beta")
    assert running.ticks(ALPHA) <= after + 1  # at most one tick already in flight


def test_reset_with_confirmation(browser, live_server, running):
    make_user("root", superuser=True)
    wait_for(lambda: PollState.objects.get(job_id=ALPHA).cursor is not None, 30)
    login(browser, live_server, "root")
    jobs_page(browser)
    run_action(browser, "reset", ALPHA)
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "confirm-reset"))
    assert "These cursors will be cleared" in browser.page_source
    shot(browser, "reset-confirm")
    PollState.objects.filter(job_id=ALPHA).update(paused=True)  # hold still while we look
    browser.find_element(By.ID, "confirm-reset").click()
    WebDriverWait(browser, 20).until(lambda d: "cursors cleared" in d.page_source)
    assert PollState.objects.get(job_id=ALPHA).cursor is None


def test_run_now_result_on_the_job_page_and_dry_run(browser, live_server, running):
    make_user("op", "view_job", "operate_job")
    login(browser, live_server, "op")
    running.publish(ALPHA, 3)
    job_page(browser, ALPHA)
    browser.find_element(By.CSS_SELECTOR, "input[name=run]").click()
    WebDriverWait(browser, 20).until(lambda d: "run queued as task" in d.page_source)

    def result_shown() -> bool:
        browser.refresh()
        return bool(browser.find_elements(By.CSS_SELECTOR, "tr.np-run")) and "SUCCESS" in (
            browser.find_element(By.ID, "job-runs").text
        )

    wait_for(result_shown, 60, interval=1, what="run-now result on the job page")
    assert "np-strip" in browser.page_source
    shot(browser, "job-page")
    PollState.objects.filter(job_id=ALPHA).update(paused=True)
    # one worker process: once beta ticked twice more, no alpha tick is in flight
    beta = running.ticks(BETA)
    wait_for(lambda: running.ticks(BETA) >= beta + 2, 30, what="beta ticks after the pause")
    running.publish(ALPHA, 99)
    before = PollState.objects.get(job_id=ALPHA)
    browser.find_element(By.CSS_SELECTOR, "input[name=dry-run]").click()
    WebDriverWait(browser, 30).until(lambda d: "Would deliver" in d.page_source)
    assert "item 99" in browser.page_source
    shot(browser, "dry-run")
    now = PollState.objects.get(job_id=ALPHA)
    assert now.cursor == before.cursor and now.epoch == before.epoch


def test_redeliver_a_dead_row(browser, live_server, running):
    make_user("op", "view_outboxrow", "redeliver", "view_job")
    now = timezone.now()
    row = outbox_row(
        ALPHA,
        at=now,
        channel="webhook",
        payload={"text": "again"},
        status="dead",
        attempts=8,
        last_error="HTTP 500",
    )
    login(browser, live_server, "op")
    browser.find_element(By.CSS_SELECTOR, "#nexopoll-summary a[href$='status__exact=dead']").click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "result_list"))
    browser.find_element(By.CSS_SELECTOR, f"input[name=_selected_action][value='{row.id}']").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("redeliver")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    WebDriverWait(browser, 20).until(lambda d: "Re-queued 1 row(s)" in d.page_source)
    wait_for(lambda: Delivery.objects.get(id=row.id).status == "sent", 30, what="row re-sent")
    assert any(h["delivery_id"] == str(row.id) for h in running.sink.hits)


def test_reload_preview_then_apply(browser, live_server, running, settings):
    settings.NEXOPOLL_CONFIG = str(running.config)  # the web process reads the stack's file
    make_user("root", superuser=True)
    login(browser, live_server, "root")
    running.write([job(ALPHA, every=1), job(BETA, every=1), job("gamma_3.x", every=5)])
    jobs_page(browser)
    browser.find_element(By.CSS_SELECTOR, ".object-tools a[href$='/reload/']").click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "reload-plan"))
    assert "gamma_3.x" in browser.find_element(By.ID, "reload-plan").text
    assert not PollJob.objects.filter(job_id="gamma_3.x").exists()
    shot(browser, "reload-plan")
    browser.find_element(By.ID, "apply-reload").click()
    WebDriverWait(browser, 20).until(lambda d: "Reload applied" in d.page_source)
    assert PollJob.objects.filter(job_id="gamma_3.x").exists()


def test_view_only_user_is_refused_actions(browser, live_server, running):
    make_user("viewer", "view_job")
    login(browser, live_server, "viewer")
    jobs_page(browser)
    options = [
        o.get_attribute("value")
        for o in browser.find_elements(By.CSS_SELECTOR, "select[name=action] option")
    ]
    assert "pause" not in options and "reset" not in options
    job_page(browser, ALPHA)
    assert not browser.find_elements(By.ID, "job-actions")
    assert not browser.find_elements(By.CSS_SELECTOR, ".object-tools a[href$='/reload/']")
    browser.get(f"{live_server.url}/admin/admin_ext/job/reload/")  # typed: no link to click
    assert "403" in browser.title or "Forbidden" in browser.page_source
    assert not PollState.objects.get(job_id=ALPHA).paused
