"""The HTML report in a real browser (headless Chromium via selenium): it loads offline without console errors,
and the roofline chart and the findings table are visible. A screenshot goes to tests/_artifacts/report.png.

Skipped when Chromium, chromedriver or selenium are missing, unless ADVISOR_REQUIRE_BROWSER=1 (CI), which turns
the skip into a failure.
"""

from __future__ import annotations

import os
import re
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


# ---------------------------------------------------------------------------------------------------------
# real reports (issue 31.8): the example, a cluster and a graph-only audit, read in the browser as a person would
# ---------------------------------------------------------------------------------------------------------
CLUSTER = Path(__file__).resolve().parents[1].parent / "shared" / "samples" / "Ascend__msinsight" / "test" / "data" \
    / "pytorch" / "text" / "level1"
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
_CHIP = re.compile(r"\bAscend[0-9][0-9A-Z]*\b(?!-class)")
_DURATION = re.compile(r"^-?[\d,.]+ (µs|ms|s)$")


def _analyze(kind: str) -> dict:
    from advisor.examples import example_graph, example_profile
    from advisor.pipeline.analysis import AnalysisOptions, run_analysis

    if kind == "example":
        return run_analysis(example_profile(), example_graph()).report
    if kind == "cluster":
        if not CLUSTER.is_dir():
            pytest.skip(f"{CLUSTER} is not here (../shared/samples)")
        return run_analysis(CLUSTER, workers=1).report
    return run_analysis(None, example_graph(), AnalysisOptions(chip="Ascend310P3")).report


@pytest.fixture(scope="module", params=["example", "cluster", "graph-only"])
def real_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, Path]:
    report = _analyze(request.param)
    path = tmp_path_factory.mktemp("real") / f"{request.param}.html"
    path.write_text(render(report, "html"), encoding="utf-8")
    return request.param, report, path


def _rect(driver: object, element: object) -> dict:
    return driver.execute_script("const r = arguments[0].getBoundingClientRect();"
                                 "return {l: r.left, t: r.top, r: r.right, b: r.bottom};", element)


def _overlap(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] and b["l"] < a["r"] and a["t"] < b["b"] and b["t"] < a["b"]


def test_real_reports_read_as_a_person_wants(driver: object, real_report: tuple[str, dict, Path]) -> None:
    from selenium.webdriver.common.by import By

    from advisor.report.evidence_format import evidence_label

    name, report, path = real_report
    driver.get(path.as_uri())
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert severe == [], severe
    ARTIFACTS.mkdir(exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 100, 12000))
    shot = ARTIFACTS / f"report-{name}.png"
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000

    # evidence: labels for people, never the JSON's snake_case keys; durations with their unit
    labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "dl.evidence dt, .evidence th")]
    assert labels or not report["findings"]
    assert not [t for t in labels if _SNAKE.search(t)], [t for t in labels if _SNAKE.search(t)]
    shown = {dt.text: dd.text for dt, dd in zip(driver.find_elements(By.CSS_SELECTOR, "dl.evidence dt"),
                                                driver.find_elements(By.CSS_SELECTOR, "dl.evidence dd"), strict=True)}
    durations = {evidence_label(k) for f in report["findings"][:200] for k, v in (f.get("evidence") or {}).items()
                 if k.endswith("_us") and isinstance(v, (int, float))}
    for label in durations & set(shown):
        assert _DURATION.match(shown[label]), (label, shown[label])
    assert "drawn in the HTML report" not in driver.find_element(By.TAG_NAME, "body").text

    # no empty card or section: each has text or a drawing, each heading is followed by content
    for el in driver.find_elements(By.CSS_SELECTOR, ".card, section, figure"):
        assert el.text.strip() or el.find_elements(By.TAG_NAME, "svg"), el.get_attribute("outerHTML")[:200]
    for h2 in driver.find_elements(By.TAG_NAME, "h2"):
        after = driver.execute_script("return arguments[0].nextElementSibling", h2)
        assert after is not None and (after.text.strip() or after.find_elements(By.TAG_NAME, "svg")), h2.text

    # one chip name in the whole report
    body = driver.find_element(By.TAG_NAME, "body").text
    chips = set(_CHIP.findall(body))
    assert len(chips) == 1, chips
    assert (report.get("platform") or {}).get("soc", next(iter(chips))) in chips

    # duration axes: their unit is the unit of the largest bar's label; ticks read in that unit
    checked = 0
    for axis in driver.find_elements(By.CSS_SELECTOR, "g[id$='-xlabel']"):
        match = re.fullmatch(r"time \((µs|ms|s)\)", axis.get_attribute("textContent").strip())
        if not match:
            continue
        checked += 1
        svg = axis.find_element(By.XPATH, "ancestor::*[local-name()='svg']")
        values = [t.text.split()[:2] for t in svg.find_elements(By.TAG_NAME, "text") if _DURATION.match(
            " ".join(t.text.split()[:2]))]
        if values:  # bar charts label each bar; the time chart has none
            largest = max(values, key=lambda v: float(v[0].replace(",", "")) * {"µs": 1, "ms": 1e3, "s": 1e6}[v[1]])
            assert largest[1] == match.group(1), (axis.text, largest)
        ticks = [float(t.text.replace(",", "").replace("−", "-")) for t in svg.find_elements(
            By.CSS_SELECTOR, "g[id^='xtick'] text") if re.fullmatch(r"[−\d.,]+", t.text.strip())]
        assert all(abs(t) < 1000 for t in ticks), (axis.text, ticks)
    assert checked == bool(report["summary"].get("top_op_types")) + bool(report["summary"].get("by_core")) \
        + bool((report.get("time") or {}).get("window_us"))  # op types, cores, time: every duration axis read

    # no legend over an axis label
    for legend in driver.find_elements(By.CSS_SELECTOR, "g[id$='-legend']"):
        svg = legend.find_element(By.XPATH, "ancestor::*[local-name()='svg']")
        for label in svg.find_elements(By.CSS_SELECTOR, "g[id$='-xlabel'], g[id$='-ylabel']"):
            assert not _overlap(_rect(driver, legend), _rect(driver, label)), (name, legend.get_attribute("id"))


@pytest.mark.parametrize("ranks", [2, 4, 16])
def test_time_chart_legend_clear_of_axis_label(driver: object, ranks: int, tmp_path: Path) -> None:
    """The cluster chart of 4 ranks put its legend over "time (ms)" (the legend sat a fixed fraction of the axes
    below them); beside the bars it stays clear at any rank count."""
    from advisor.report import charts

    rank = {"compute_by_core": {"cube": 5e4, "vector": 2e4}, "uncovered_by_kind": {"wait": 1e4, "idle": 3e4},
            "free_us": 2e4, "free_by_kind": {"launch": 1e4}}
    page = tmp_path / "chart.html"
    page.write_text("<html><body>" + charts.time_chart({"ranks": {str(i): rank for i in range(ranks)}})
                    + "</body></html>", encoding="utf-8")
    driver.get(page.as_uri())
    legend, label = (driver.find_element("id", i) for i in ("time-legend", "time-xlabel"))
    assert "time (ms)" in label.get_attribute("textContent")
    assert not _overlap(_rect(driver, legend), _rect(driver, label))
