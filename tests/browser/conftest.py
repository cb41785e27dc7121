"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium.

Nothing is downloaded at run time: the browser and the driver must be installed
(`make test` installs them with apt when it can). Without them these tests skip
with a loud reason; `.ci/run` installs them first, so CI always runs them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.integration.conftest import stack  # noqa: F401  (real worker/beat/Redis)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest.fixture(scope="session")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        pytest.skip(
            "BROWSER TESTS SKIPPED: install Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver) to run them"
        )
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="nexopoll-chromium-")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1920,1000",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.implicitly_wait(0)
    ARTIFACTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
