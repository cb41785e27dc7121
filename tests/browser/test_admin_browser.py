"""The admin in headless Chromium against a live server, a real worker, beat and Redis."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from nexopoll.models import Delivery, PollJob, PollState
from tests.integration.conftest import job
from tests.support.procs import wait_for

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.integration]
DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


def make_user(name: str, *perms: str, superuser: bool = False) -> User:
    user = User.objects.create_user(name, password=f"pw-{name}-1", is_staff=True,
                                    is_superuser=superuser)  # fmt: skip
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


def login(driver, live_server, name: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{live_server.url}/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(f"pw-{name}-1")
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(driver, 20).until(lambda d: "nexopoll-summary" in d.page_source)


def jobs_page(driver, live_server, query: str = "") -> None:
    driver.get(f"{live_server.url}/admin/admin_ext/job/{query}")
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.ID, "result_list"))


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
    stack.write([job("alpha", every=1), job("beta", every=1)])
    stack.reload()
    stack.publish("alpha", 1, 2)
    stack.worker()
    stack.beat()
    wait_for(lambda: stack.ticks("alpha") >= 1 and stack.ticks("beta") >= 1, 60, what="ticks")
    return stack


def test_jobs_list_pause_and_it_stops_ticking(browser, live_server, running):
    make_user("root", superuser=True)
    login(browser, live_server, "root")
    wait_for(lambda: PollState.objects.get(job_id="alpha").last_status == "ok", 30)
    jobs_page(browser, live_server)
    page = browser.page_source
    assert "alpha" in page and "beta" in page and "every 1 s" in page and "np-ok" in page
    picture = shot(browser, "jobs-list")
    if os.environ.get("NEXOPOLL_DOCS_SCREENSHOT") == "1":  # refresh docs/admin-jobs.png
        shutil.copy(picture, DOCS / "admin-jobs.png")
    run_action(browser, "pause", "alpha")
    WebDriverWait(browser, 20).until(lambda d: "Paused 1 job(s)" in d.page_source)
    assert PollState.objects.get(job_id="alpha").paused
    after = running.ticks("alpha")
    beta = running.ticks("beta")
    wait_for(lambda: running.ticks("beta") >= beta + 3, 30, what="three more slots of beta")
    assert running.ticks("alpha") <= after + 1  # at most one tick already in flight


def test_reset_with_confirmation(browser, live_server, running):
    make_user("root", superuser=True)
    wait_for(lambda: PollState.objects.get(job_id="alpha").cursor is not None, 30)
    login(browser, live_server, "root")
    jobs_page(browser, live_server)
    run_action(browser, "reset", "alpha")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "confirm-reset"))
    assert "These cursors will be cleared" in browser.page_source
    shot(browser, "reset-confirm")
    PollState.objects.filter(job_id="alpha").update(paused=True)  # hold still while we look
    browser.find_element(By.ID, "confirm-reset").click()
    WebDriverWait(browser, 20).until(lambda d: "cursors cleared" in d.page_source)
    assert PollState.objects.get(job_id="alpha").cursor is None


def test_run_now_result_on_the_job_page_and_dry_run(browser, live_server, running):
    make_user("op", "view_job", "operate_job")
    login(browser, live_server, "op")
    running.publish("alpha", 3)
    browser.get(f"{live_server.url}/admin/admin_ext/job/alpha/change/")
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
    PollState.objects.filter(job_id="alpha").update(paused=True)
    # one worker process: once beta ticked twice more, no alpha tick is in flight
    beta = running.ticks("beta")
    wait_for(lambda: running.ticks("beta") >= beta + 2, 30, what="beta ticks after the pause")
    running.publish("alpha", 99)
    before = PollState.objects.get(job_id="alpha")
    browser.find_element(By.CSS_SELECTOR, "input[name=dry-run]").click()
    WebDriverWait(browser, 30).until(lambda d: "Would deliver" in d.page_source)
    assert "item 99" in browser.page_source
    shot(browser, "dry-run")
    now = PollState.objects.get(job_id="alpha")
    assert now.cursor == before.cursor and now.epoch == before.epoch


def test_redeliver_a_dead_row(browser, live_server, running):
    make_user("op", "view_outboxrow", "redeliver", "view_job")
    now = timezone.now()
    row = Delivery.objects.create(id=uuid.uuid4(), job_id="alpha", agent="ana", epoch=1,
                                  channel="webhook", recipient="ops", payload={"text": "again"},
                                  status="dead", attempts=8, next_attempt_at=now, created_at=now,
                                  last_error="HTTP 500")  # fmt: skip
    login(browser, live_server, "op")
    browser.get(f"{live_server.url}/admin/admin_ext/outboxrow/?status__exact=dead")
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
    running.write([job("alpha", every=1), job("beta", every=1), job("gamma", every=5)])
    jobs_page(browser, live_server)
    browser.find_element(By.CSS_SELECTOR, ".object-tools a[href$='/reload/']").click()
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "reload-plan"))
    assert "gamma" in browser.find_element(By.ID, "reload-plan").text
    assert not PollJob.objects.filter(job_id="gamma").exists()
    shot(browser, "reload-plan")
    browser.find_element(By.ID, "apply-reload").click()
    WebDriverWait(browser, 20).until(lambda d: "Reload applied" in d.page_source)
    assert PollJob.objects.filter(job_id="gamma").exists()


def test_view_only_user_is_refused_actions(browser, live_server, running):
    make_user("viewer", "view_job")
    login(browser, live_server, "viewer")
    jobs_page(browser, live_server)
    options = [
        o.get_attribute("value")
        for o in browser.find_elements(By.CSS_SELECTOR, "select[name=action] option")
    ]
    assert "pause" not in options and "reset" not in options
    browser.get(f"{live_server.url}/admin/admin_ext/job/alpha/change/")
    assert not browser.find_elements(By.ID, "job-actions")
    browser.get(f"{live_server.url}/admin/admin_ext/job/reload/")
    assert "403" in browser.title or "Forbidden" in browser.page_source
    assert not PollState.objects.get(job_id="alpha").paused
