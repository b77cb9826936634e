"""The HTML report in a real browser (headless Chromium via selenium): it loads offline without console errors,
and the roofline chart and the findings table are visible. A screenshot goes to tests/_artifacts/report.png.

Skipped when Chromium, chromedriver or selenium are missing, unless ADVISOR_REQUIRE_BROWSER=1 (CI), which turns
the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.report import render
from tests._report_sample import sample_report

ARTIFACTS = Path(__file__).resolve().parent / "_artifacts"
REQUIRED = os.environ.get("ADVISOR_REQUIRE_BROWSER") == "1"


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"ADVISOR_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def _find(*names: str) -> str | None:
    for n in names:
        found = shutil.which(n)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install selenium)")
    browser = _find("chromium", "chromium-browser", "google-chrome")
    chromedriver = _find("chromedriver")
    if not browser or not chromedriver:
        _unavailable("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium must not phone home; drivers are given below
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,2000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render(sample_report(with_model_summary=True), "html"), encoding="utf-8")
    return path


def test_report_renders_in_chromium(driver: object, report_file: Path) -> None:
    from selenium.webdriver.common.by import By

    driver.get(report_file.as_uri())
    assert driver.title.startswith("advisor report · score 85.0")
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert severe == [], severe

    roofline = driver.find_element(By.ID, "roofline-chart")
    findings = driver.find_element(By.ID, "findings-table")
    for el in (roofline, findings, driver.find_element(By.ID, "op-type-chart"),
               driver.find_element(By.ID, "core-chart")):
        assert el.is_displayed()
        assert el.size["width"] > 200 and el.size["height"] > 100
    summary = driver.find_element(By.ID, "model-summary")  # work, utilization, block dim, each with its source
    assert summary.is_displayed() and "cube work" in summary.text and "Block Dim" in summary.text
    svg = roofline.find_element(By.TAG_NAME, "svg")
    assert svg.is_displayed() and svg.size["width"] > 300 and svg.size["height"] > 200
    rows = findings.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 5
    assert "NonMaxSuppressionV3 runs on AI CPU" in rows[0].text

    # the layout keeps the report inside the window (nothing forces horizontal scrolling)
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    # the in-page link of the first finding leads to its section
    rows[0].find_element(By.TAG_NAME, "a").click()
    assert driver.current_url.endswith("#finding-1")
    assert driver.find_element(By.ID, "finding-1").is_displayed()

    ARTIFACTS.mkdir(exist_ok=True)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(ARTIFACTS / "report.png"))
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
