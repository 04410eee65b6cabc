"""report.html in a real browser (headless Chromium): the token spans, the method selector and
the faithfulness table render, and the page is not blank. Skipped, with the reason printed, where
Chromium is not installed (`.ci/run` installs the Debian package where apt-get works)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from matplotlib import image

from jcaps.viz.html import write_explanation_report

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
METHODS = ("integrated_gradients", "occlusion", "random")


def chromium(*args: str) -> subprocess.CompletedProcess:
    if BROWSER is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "report.html"
    tokens = ["oil", "prices", "rose", "after", "opec", "cut", "output"]
    scores = {m: list(np.linspace(1, -1, len(tokens)) * (k + 1)) for k, m in enumerate(METHODS)}
    entry = {"index": 0, "tokens": tokens, "label": "Business", "prediction": "Business", "target": "Business",
             "probability": 0.9, "scores": scores}
    metrics = {"comprehensiveness": 0.3, "sufficiency": 0.05, "deletion_auc": 0.2, "insertion_auc": 0.8}
    faithfulness = {m: {**metrics, "ci95": {k: [v - 0.01, v + 0.01] for k, v in metrics.items()},
                        "seconds_per_100": 0.5, "rows": 1} for m in METHODS}
    write_explanation_report(path, title="fasttext on test", methods=METHODS, groups={"Business": [entry]},
                             faithfulness=faithfulness)
    return path


def test_dom_has_token_spans_the_method_selector_and_the_table(report):
    result = chromium("--dump-dom", report.as_uri())
    assert result.returncode == 0, result.stderr
    dom = result.stdout
    assert dom.count('class="tok"') == 7 * len(METHODS)
    assert dom.count('type="radio"') == len(METHODS) and 'nav class="methods"' in dom
    assert all(f'for="method-{m.replace("_", "-")}"' in dom for m in METHODS)
    assert '<table class="faithfulness">' in dom and "comprehensiveness − random" in dom


def test_screenshot_is_not_blank(report, tmp_path):
    shot = tmp_path / "report.png"
    result = chromium(f"--screenshot={shot}", "--window-size=1000,800", report.as_uri())
    assert result.returncode == 0 and shot.is_file(), result.stderr
    pixels = image.imread(shot)[..., :3]
    colours = np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50, "the screenshot is (nearly) one colour"
    # The checked method's tokens are highlighted: orange pixels are on screen.
    orange = (pixels[..., 0] > 0.9) & (pixels[..., 1] > 0.45) & (pixels[..., 1] < 0.75) & (pixels[..., 2] < 0.3)
    assert orange.sum() > 100
