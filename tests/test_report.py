"""A report from a tiny real sweep, opened in headless Chromium as its reader would."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_multirun

pytestmark = pytest.mark.slow

EVIL = "<script>window.__pwned=1;alert(1)</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Trial 0 (batch 8) runs, 16 aborts, 32 runs, 64 runs out of memory; a hostile study name."""
    tmp = tmp_path_factory.mktemp("report")
    run_multirun(
        tmp,
        "search=none",
        "task=custom",
        "task.factory=misbehaving:fails_at_batch",
        "+task.params.crash=16",
        "+task.params.oom_from=64",
        "loader.batch_size=8",
        "loader.batch_size=choice(8,16,32,64)",
        "hydra.sweeper.sampler._target_=optuna.samplers.GridSampler",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.confirm=1",
        name="outputs/sweeps/night1",
        study=f"'{EVIL}'",
    )
    return tmp, tmp / "outputs" / "sweeps" / "night1"


def test_report_is_self_contained_and_escaped(swept):
    _, sweep_dir = swept
    html = (sweep_dir / "report.html").read_text()
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!data:|#)""", html)
    assert "<link" not in html and "@import" not in html
    assert EVIL not in html and "&lt;script&gt;window.__pwned" in html
    assert html.count("<img") >= 4  # (the latency chart is drawn for inference runs only)


def need_chromium() -> None:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing in CI: .ci/run installs Debian's chromium")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")


def test_report_opens_in_chromium(swept):
    need_chromium()
    from playwright.sync_api import sync_playwright

    _, sweep_dir = swept
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.goto((sweep_dir / "report.html").as_uri())
        page.wait_for_load_state("load")
        sizes = page.eval_on_selector_all("img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
        assert sizes and all(ok and w > 0 and h > 0 for ok, w, h in sizes), sizes
        assert page.evaluate("window.__pwned") is None

        headers = page.eval_on_selector_all("#trials th", "els => els.map(e => e.textContent)")
        col = headers.index("samples_per_sec")
        read = (
            f"Array.from(document.querySelectorAll('#trials tbody tr')).map(r => r.cells[{col}].getAttribute('data-v'))"
        )
        page.click(f"#trials th:nth-child({col + 1})")
        ascending = [float(v) for v in page.evaluate(read) if v]
        page.click(f"#trials th:nth-child({col + 1})")
        descending = [float(v) for v in page.evaluate(read) if v]
        assert len(ascending) >= 2
        assert ascending == sorted(ascending) and descending == sorted(descending, reverse=True)
        statuses = page.eval_on_selector_all("#trials tbody tr td:nth-child(3)", "els => els.map(e => e.textContent)")
        assert {"ok", "crash", "oom"} <= set(statuses)
        browser.close()
    assert problems == []


@contextlib.contextmanager
def opened(report: Path, width: int, height: int = 900):
    """The report in real Chromium, at this window size, as a reader opens it."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(report.as_uri())
        yield page
        browser.close()


def test_the_morning_read_in_chromium(swept):
    """At 1200 px: the winner's code against the baseline names only what changed, no table
    cell wraps, the tab says what the page is, the headline has both times."""
    _, sweep_dir = swept
    with opened(sweep_dir / "report.html", 1200) as page:
        diff = page.inner_text("#code-diff")
        assert "batch_size=" in diff
        assert not any(word in diff for word in ("num_workers", "autocast", "set_num_threads", "channels_last"))
        # one line per cell: every row as tall as the shortest (a wrapped cell would double it)
        heights = page.eval_on_selector_all("#trials tbody td", "els => els.map(e => e.getBoundingClientRect().height)")
        assert heights and max(heights) < 1.5 * min(heights), (min(heights), max(heights))
        title = page.title()
        assert title.startswith("sweeper: custom train on ") and re.search(r"\d{4}-\d{2}-\d{2}", title)
        cards = page.inner_text("#search-cards")
        assert "wall time of the trials" in cards and "the sweep took, confirmation included" in cards
        assert page.inner_text("#stopped") in (
            "Stopped n_trials=4 reached",
            "Stopped the sampler has tried everything it had (grid exhausted)",
        )
        page.click("#trials tbody tr:first-child a.link")
        assert page.evaluate("location.hash").startswith("#trial-")
        # a script's command line is one long diff line: it wraps inside the box, none hidden
        long = "python train.py " + " ".join(f"--option-{i} {i}" for i in range(40))
        page.eval_on_selector(
            "#code-diff", "(pre, text) => { pre.lastElementChild.lastChild.textContent = text }", long
        )
        width = page.eval_on_selector("#code-diff", "pre => [pre.scrollWidth, pre.clientWidth]")
        assert width[0] <= width[1], width


def test_the_answer_is_on_the_first_screen(swept):
    """At 1400x900, as a person opens it in the morning: the speedup and the code to change lie
    inside the first viewport, the search's notes and the YAML are collapsed."""
    _, sweep_dir = swept
    with opened(sweep_dir / "report.html", 1400) as page:
        for selector in ("#answer", "#code-diff", "#command"):
            box = page.locator(selector).bounding_box()
            assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 900, (selector, box)
        assert re.search(r"\d+\.\d\dx", page.inner_text("#answer"))
        assert page.eval_on_selector_all("details", "els => els.every(e => !e.open)")


def test_report_regenerates_from_the_storage(swept):
    import json

    import optuna

    tmp, sweep_dir = swept
    # a trial still running (the sweep is not over): the report is a view of the storage
    info = json.loads((sweep_dir / "sweep.json").read_text())
    assert info["study"].startswith(EVIL + "@")
    study = optuna.load_study(study_name=info["study"], storage=f"sqlite:///{tmp / 'study.db'}")
    running = study.ask()
    running.set_user_attr("fixed_overrides", json.loads((sweep_dir / "sweep.json").read_text())["fixed_overrides"])
    (sweep_dir / "report.html").unlink()
    cli = [sys.executable, "-m", "sweeper.report"]
    subprocess.run([*cli, str(sweep_dir)], cwd=ROOT, check=True, capture_output=True)
    assert (sweep_dir / "report.html").stat().st_size > 10_000
    assert ">running<" in (sweep_dir / "report.html").read_text()
    out = tmp / "again.html"
    subprocess.run(
        [*cli, "--storage", f"sqlite:///{tmp / 'study.db'}", "--study", info["study"], "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    assert "&lt;script&gt;" in out.read_text()
    bad = subprocess.run([*cli, str(tmp)], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and f"holds no sweep.json (the newest sweep under it: {sweep_dir})" in bad.stderr
    bad = subprocess.run([*cli, str(tmp / "nope")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and f"error: '{tmp / 'nope'}' does not exist: give a sweep's directory" in bad.stderr


def test_index_lists_the_sweep(swept):
    tmp, _ = swept
    index = (tmp / "outputs" / "index.html").read_text()
    assert "sweeps/night1/report.html" in index
    assert "custom train" in index and "No sweep listed" not in index


def test_an_index_without_sweeps_says_where_they_would_be(tmp_path):
    from sweeper.report.index import write_index

    index = write_index(tmp_path / "outputs").read_text()
    assert f"No sweep listed: none under {tmp_path / 'outputs'} has its summary.json yet" in index


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _study_with_a_skipped_point(storage: str) -> int:
    """A study beside the sweep's, of one trial skipped as sweeper skips a point: its id."""
    from sweeper.result import Status
    from sweeper.search.trials import skip
    from sweeper.store.study import StoredStudy

    stored = StoredStudy.open(storage, "one-skipped-point")
    skip(stored, stored.study.ask(), Status.SKIPPED, "2 ranks x 2 threads oversubscribe the 2 cores")
    return stored.study_id


def test_optuna_dashboard_opens_the_study(swept):
    """optuna-dashboard (the optional extra .[dashboard]) on loopback, against the study a sweep
    wrote: its API shows the objectives by name, every trial's knobs and figures and the failure
    reasons, the study's facts; its page lists the trials in headless Chromium."""
    import json
    import time
    import urllib.request

    tmp, sweep_dir = swept
    storage = f"sqlite:///{tmp / 'study.db'}"
    skipped_id = _study_with_a_skipped_point(storage)
    port = _free_port()
    dashboard = str(Path(sys.executable).parent / "optuna-dashboard")  # the console script the extra installs
    server = subprocess.Popen(
        [dashboard, storage, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                studies = json.loads(urllib.request.urlopen(f"{base}/api/studies", timeout=2).read())
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"optuna-dashboard did not answer: {server.stderr.read1().decode()[-500:]}")
        name = json.loads((sweep_dir / "sweep.json").read_text())["study"]
        (summary,) = [s for s in studies["study_summaries"] if s["study_name"] == name]
        study = json.loads(urllib.request.urlopen(f"{base}/api/studies/{summary['study_id']}?after=0").read())
        assert study["objective_names"] == ["samples_per_sec"]  # the default objective, by name
        facts = {a["key"]: a["value"] for a in study["user_attrs"]}
        assert facts["workload"].startswith("custom train") and "baseline_trial" in facts and "winner_trial" in facts
        trials = [t for t in study["trials"] if t["state"] != "Running"]
        assert {p["name"] for t in trials for p in t["params"]} == {"loader.batch_size"}
        attrs = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in trials]
        assert {a["status"] for a in attrs} >= {"ok", "crash", "oom"}
        assert any("SIGABRT" in str(a.get("reason")) for a in attrs)
        assert all("samples_per_sec" in str(a["metrics"]) for a in attrs if a["status"] == "ok")
        # a point the preset skips is told pruned (for TPE), and its status says skipped
        other = json.loads(urllib.request.urlopen(f"{base}/api/studies/{skipped_id}?after=0").read())
        (shown,) = other["trials"]
        assert shown["state"] == "Pruned"
        assert {a["key"]: a["value"] for a in shown["user_attrs"]}["status"] == "skipped"
        need_chromium()
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/dashboard/studies/{summary['study_id']}/trials")
            page.wait_for_selector("text=Trial 3", timeout=30_000)
            assert page.locator("text=Trial 0").count() >= 1
            page.goto(f"{base}/dashboard/studies/{skipped_id}/trials")
            page.wait_for_selector("text=oversubscribe", timeout=30_000)  # the trial's attributes, shown
            assert page.locator("text=Skipped, not measured").count() == 1  # its note, above them
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
