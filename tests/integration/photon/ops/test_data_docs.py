"""Verification's Great Expectations Checkpoint builds the run's Data Docs, and they render:
a page of them opened in headless Chromium (Debian's, driven by Playwright), screenshot
and read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from photon.ops.verify import offline_styled, run_expectations, validation_pages, verdict_frame

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
T = 1_767_225_600_000_000


def _row(n: int, dc: str = "a") -> dict[str, object]:
    return {"click_id": f"10.0.0.1:1:{T + n}", "query_id": f"10.0.9.1:1:{T - 1_000_000 + n}",
            "dc": dc, "joined_at_us": T + n + 2_000_000}  # fmt: skip


def test_the_runs_data_docs_render_in_chromium_and_name_the_failed_expectation(
    tmp_path: Path,
) -> None:
    from matplotlib.image import imread
    from playwright.sync_api import sync_playwright

    rows = [_row(0), _row(1), _row(1, dc="b"), _row(2)]  # click 1 joined twice
    inputs = {str(r["click_id"]): str(r["query_id"]) for r in rows}
    missing = str(_row(3)["click_id"])  # in the input, in no output: the window fails
    inputs[missing] = "10.0.9.1:1:1"
    clicks = dict.fromkeys(inputs, "joined") | {missing: "missing"}
    site = tmp_path / "site"
    outcomes = run_expectations(
        verdict_frame(rows, inputs, clicks),
        latency_bound_s=3600.0,
        max_clock_skew_s=5.0,
        run="verify-run-42",
        docs_dir=site,
    )
    unique = next(o for o in outcomes if o.expectation.endswith("to_be_unique"))
    assert not unique.success and unique.unexpected_count == 2
    settled = next(o for o in outcomes if o.column == "outcome")
    assert not settled.success and settled.unexpected_sample == ["missing"]
    # the rows of clicks without output do not fail the joined rows' own checks
    assert all(o.success for o in outcomes if o.column in ("dc", "latency_s", "query_id"))
    assert (site / "index.html").is_file()
    [page_file] = validation_pages(site)
    page_file.write_bytes(offline_styled(page_file.read_bytes()))  # as it is published

    shot = tmp_path / "validation.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            # No network here: the site's CDN scripts and styles fail at once, not late.
            page.route(
                "**/*",
                lambda route: (
                    route.continue_() if route.request.url.startswith("file:") else route.abort()
                ),
            )
            page.goto(page_file.as_uri(), wait_until="domcontentloaded")
            page.screenshot(path=str(shot), full_page=True)
            text = page.inner_text("body")
            # styled without the CDNs: its tables have borders, its verdicts colours
            border = page.evaluate("getComputedStyle(document.querySelector('td')).borderTopStyle")
            font = page.evaluate("getComputedStyle(document.body).fontFamily")
        finally:
            browser.close()
    assert "photon_joined_output" in text and "verify-run-42" in text
    # each check as the report says it: the duplicate, and the click left unsettled
    assert "Status: Failed" in text and "No click is output twice" in text
    assert "Every click of the window is settled" in text and "missing" in text
    assert border == "solid" and "system-ui" in font
    image = imread(shot)
    assert image.shape[0] >= 900 and image.shape[1] == 1200
    assert image[..., :3].std() > 0.05  # drawn text and tables, not a blank page
