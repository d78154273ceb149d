"""The recommendation page (serving/page.py, serving/static/): its JSON endpoints on a tabular run,
and the page itself in a real browser -- headless Chromium driven by selenium against the app
served on loopback: a refused German record typed in with the keyboard, the recommendation read
from the page and checked against the model, the world's rules and units in words (German's default
rules; age, which only time moves, said as a wait), who answered behind a details toggle, an
out-of-range value shown beside its field, the example button, and the layout at a phone's width.

The browser test needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and
selenium (the ``test`` extra). Without them it skips, except in CI (``RECOURSE_STRICT_SKIPS=1``),
where it fails: CI installs them, so a missing browser there is a broken install.
Set ``RECOURSE_PAGE_SCREENSHOTS=docs/img`` to refresh the screenshots of docs/serving.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from data_gen.default_rules import default_rules
from serving.tabular import TabularService
from serving.tabular_app import create_tabular_app
from tests.tabular_serving_run import german_run


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("page")
    return (root, *german_run(root))


@pytest.fixture(scope="module")
def svc(built):
    from dataclasses import replace
    from types import SimpleNamespace

    root, run, X_train, _, _ = built
    run = SimpleNamespace(**{**vars(run), "world": replace(run.world, rules=default_rules("german"))})
    s = TabularService(root / "german_forest", "nearest", None, run=run, geco_data=X_train)
    yield s
    s.close()


@pytest.fixture(scope="module")
def app(svc):
    return create_tabular_app("unused", service=svc)


def apply(record: dict, changes: list[dict]) -> dict:
    out = dict(record)
    for c in changes:
        assert out[c["feature"]] == c["from"], c
        out[c["feature"]] = c["to"]
    return out


def accepted(svc: TabularService, record: dict) -> bool:
    return bool(svc.world.accepts(svc.codec.encode([record]))[0])


# ------------------------------------------------------------------------------------------ JSON API
def test_schema_describes_the_request(app, svc):
    c = TestClient(app)
    form = c.get("/schema").json()
    assert form["kind"] == "tabular" and form["body"] == "record" and form["method"] == "nearest"
    assert [f["name"] for f in form["fields"]] == svc.codec.names
    by = {f["name"]: f for f in form["fields"]}
    assert by["purpose"]["input"] == "select" and "car (new)" in [o["value"] for o in by["purpose"]["options"]]
    assert by["age"] | {"description": None} == by["age"] | {
        "input": "number", "minimum": 19.0, "maximum": 75.0, "step": 1.0, "mutability": "increase", "description": None}
    assert by["personal_status_sex"]["mutability"] == "immutable"
    # the spec's display names and units; age moves only with time
    assert (by["age"]["time"], by["age"]["unit"], by["duration"]["label"], by["duration"]["unit"]) == (
        "years", "years", "loan duration", "months")
    assert by["duration"]["time"] is None and by["employment"]["time"] is None
    rules = {r["name"]: r for r in form["rules"]}
    assert list(rules) == list(svc.rules.names)
    assert rules["duration: max_decrease 12"] == {"name": "duration: max_decrease 12", "from_schema": False,
                                                  "text": "Loan duration falls by at most 12 months.",
                                                  "features": ["duration"]}
    assert rules["age: increase-only (schema)"]["from_schema"]
    assert rules["link employment -> age (2 per unit)"]["text"] == \
        "Age rises with employment length: each level of employment length takes at least 2 years."
    assert form["certificate"] == {"rel_tol": 0.001, "epsilon": 1e-7} and form["max_diverse"] == svc.max_diverse
    paths = c.get("/openapi.json").json()["paths"]
    assert "/schema" in paths and "/example" in paths and "/" not in paths


def test_example_is_a_rejected_test_record(app, svc, built):
    c = TestClient(app)
    neg = built[3]
    a, b = c.get("/example", params={"seed": 3}).json(), c.get("/example", params={"seed": 3}).json()
    assert a == b and a["count"] == len(neg)
    assert not accepted(svc, a["record"])
    assert any(np.array_equal(svc.codec.encode([a["record"]])[0], x) for x in neg)
    assert c.get("/example", params={"seed": -1}).status_code == 422


def test_page_and_assets_are_served(app):
    c = TestClient(app)
    for path, kind in (("/", "text/html"), ("/page.js", "text/javascript"), ("/page.css", "text/css")):
        r = c.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
        assert "script-src 'self'" in r.headers["content-security-policy"]
    html = c.get("/").text
    assert '<meta name="viewport"' in html and 'src="page.js"' in html and "<script>" not in html


# ------------------------------------------------------------------------------------------ browser
CHROME_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage")


def _missing(why: str) -> None:
    if os.environ.get("RECOURSE_STRICT_SKIPS") == "1":
        pytest.fail(f"{why}: CI installs chromium, chromium-driver and selenium (.ci/run), so this is a broken install")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[test]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        _missing("no chromium / chromedriver (apt-get install -y chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in (*CHROME_ARGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}", "--window-size=1280,1600"):
        opts.add_argument(a)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@contextmanager
def served(app) -> Iterator[str]:
    """The app served by uvicorn on a free loopback port: its base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def base_url(app):
    with served(app) as url:
        yield url


def _screenshot(driver, name: str) -> None:
    """The whole page as PNG into $RECOURSE_PAGE_SCREENSHOTS (docs/img refreshes the docs' images)."""
    out = os.environ.get("RECOURSE_PAGE_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        w, h = driver.get_window_size()["width"], driver.get_window_size()["height"]
        driver.set_window_size(w, driver.execute_script("return document.documentElement.scrollHeight") + 120)
        driver.save_screenshot(str(Path(out) / name))
        driver.set_window_size(w, h)


def _wait(driver, cond, timeout: float = 15.0):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(cond)


def _field(driver, name: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'.field[data-name="{name}"]')


def _type_record(driver, record: dict) -> None:
    """Enter a record with the keyboard, field by field, as a person without a mouse would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    for name, value in record.items():
        control = _field(driver, name).find_element(By.CSS_SELECTOR, "select, input")
        if control.tag_name == "select":
            Select(control).select_by_value(json.dumps(value, ensure_ascii=False))
        else:
            control.send_keys(Keys.CONTROL, "a")
            control.send_keys(str(value))


def _form_record(driver) -> dict:
    """The record the form holds now, as the page would send it."""
    return driver.execute_script("""
        const out = {};
        document.querySelectorAll('#fields .field').forEach(f => {
          const c = f.querySelector('select, input');
          out[f.dataset.name] = c.tagName === 'SELECT' ? JSON.parse(c.value) : Number(c.value);
        });
        return out;""")


def _submit_with_keyboard(driver) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.execute_script("document.getElementById('answer').hidden = true;")  # to see the new answer appear
    driver.find_element(By.ID, "submit").send_keys(Keys.ENTER)


def _text(element) -> str:
    """An element's text, folded parts (a closed <details>) included."""
    return " ".join(element.get_attribute("textContent").split())


def _rules_listed(form: dict, names: list[str]) -> list[str]:
    """The rules the page lists under an answer: those the API names, once per sentence, without the
    sentences the fields' tags say already (the schema's mutability)."""
    text = {r["name"]: r["text"] for r in form["rules"]}
    seen = {r["text"] for r in form["rules"] if r["from_schema"]}
    out = []
    for n in names:
        if text[n] not in seen:
            seen.add(text[n])
            out.append(n)
    return out


def test_page_in_a_browser(browser, base_url, svc, built):
    from selenium.webdriver.common.by import By

    neg = built[3]
    # A refused test record the generator answers (the page shows what the API answers, whoever answers),
    # one whose answer raises age (a wait, on the page) where the first 40 have one.
    answers, _ = svc.first_pass(neg[:40])
    age = svc.codec.domains[svc.codec.names.index("age")].columns[0]
    mine = [k for k, a in enumerate(answers) if a.kind == "generator"]
    i = next((k for k in mine if answers[k].cf[age] > neg[k][age]), mine[0])
    record = svc.codec.decode(neg[i])
    assert not accepted(svc, record)
    form = httpx.get(base_url + "/schema").json()
    fields = {f["name"]: f for f in form["fields"]}

    browser.get(base_url + "/")
    _wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
    # Every control has its label; the fixed and one-way features say so.
    assert browser.execute_script(
        "return [...document.querySelectorAll('#fields select, #fields input')].every(c => c.labels.length === 1)")
    assert "fixed" in _field(browser, "personal_status_sex").text
    assert "moves with time" in _field(browser, "age").text and "can only increase" in _field(browser, "employment").text
    # the world's rules in words, above the form (folded)
    listed = browser.find_elements(By.CSS_SELECTOR, "#all-rules li")
    assert "Loan duration falls by at most 12 months." in [_text(li) for li in listed]
    assert not any(li.get_attribute("data-rule").endswith("(schema)") for li in listed)

    _type_record(browser, record)
    _submit_with_keyboard(browser)
    _wait(browser, lambda d: d.find_element(By.ID, "answer").get_attribute("data-alternatives") == "done")
    rows = browser.find_elements(By.CSS_SELECTOR, "#result table.changes tbody tr")
    shown = [{"feature": r.get_attribute("data-feature"), "from": json.loads(r.get_attribute("data-from")),
              "to": json.loads(r.get_attribute("data-to"))} for r in rows]
    assert shown, "no change shown"
    assert accepted(svc, apply(record, shown))  # the record the page recommends is accepted by the model
    api = httpx.post(base_url + "/recommend", json={**record, "n_diverse": 2}).json()
    assert shown == api["changes"]  # what a person sees is what a program gets
    assert svc.rules.holds(svc.codec.encode([record])[0], svc.codec.encode([apply(record, shown)])).all()
    sentence = browser.find_element(By.ID, "sentence").text
    assert sentence.endswith(".")
    for c in shown:  # each change in the sentence by its display name; a wait for age ("In 4 years, ...")
        if c["feature"] == "age":
            n = c["to"] - c["from"]
            assert re.match(rf"^(In {n} years?, |Wait {n} years?)", sentence), sentence
        else:
            assert fields[c["feature"]]["label"] in sentence, sentence
    for r in browser.find_elements(By.CSS_SELECTOR, "#result table.changes tbody tr"):
        f, cells = fields[r.get_attribute("data-feature")], r.find_elements(By.TAG_NAME, "td")
        if f["time"]:
            assert cells[1].text.startswith("in ") and "year" in cells[1].text
        elif f["unit"]:
            assert all(f["unit"].rstrip("s") in td.text for td in cells)
    # the rules this answer keeps, as sentences: those the API says bear on it (a changed feature's, a fired IF's)
    assert api["rules"] and api["refused_by"] is None
    assert svc.rules.holds(svc.codec.encode([record])[0], svc.codec.encode([apply(record, shown)])).all()
    assert [li.get_attribute("data-rule") for li in browser.find_elements(By.CSS_SELECTOR, "#rules li")] == \
        _rules_listed(form, api["rules"])
    assert browser.find_element(By.CSS_SELECTOR, ".badge.verified").text == "verified"
    # who answered and the normalized distance: behind a details toggle, not as badges
    badges = browser.find_element(By.ID, "badges").text
    assert "answered by" not in badges.lower() and "distance" not in badges
    info = browser.find_element(By.CSS_SELECTOR, "#answer-details details")
    assert info.get_attribute("open") is None
    assert f"Answered by {api['method']}." in _text(info)
    shown_d = float(re.search(r"Cost \(normalized distance\) ([0-9.e+-]+)\.", _text(info)).group(1))
    assert shown_d == pytest.approx(api["distance"], rel=5e-3)
    assert browser.switch_to.active_element.get_attribute("id") == "answer"  # focus moves to the answer
    cards = browser.find_elements(By.CSS_SELECTOR, "#alternatives .alternative")
    assert len(cards) == len(api["alternatives"])
    _screenshot(browser, "page_german.png")

    # An out-of-range value: the API's message beside its field, the field marked and focused.
    _type_record(browser, {"age": 500})
    _submit_with_keyboard(browser)
    err = _field(browser, "age").find_element(By.CSS_SELECTOR, ".field-error")
    _wait(browser, lambda d: err.text != "")
    assert "75" in err.text and "500" in err.text
    age = _field(browser, "age").find_element(By.TAG_NAME, "input")
    assert age.get_attribute("aria-invalid") == "true"
    assert browser.switch_to.active_element == age
    assert not browser.find_element(By.ID, "answer").is_displayed()

    # The example button fills a refused test record.
    browser.find_element(By.ID, "example").click()
    _wait(browser, lambda d: err.text == "" and age.get_attribute("value") != "500")
    filled = _form_record(browser)
    assert set(filled) == set(svc.codec.names) and not accepted(svc, filled)

    # A phone's width: nothing wider than the screen.
    browser.set_window_size(390, 844)
    try:
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    finally:
        browser.set_window_size(1280, 1600)


def _example_and_answer(browser, url: str) -> None:
    """Load the page, fill in a refused test record with the example button, submit, wait."""
    from selenium.webdriver.common.by import By

    browser.get(url + "/")
    _wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
    browser.find_element(By.ID, "example").click()
    _wait(browser, lambda d: d.find_element(By.ID, "submit").is_enabled())
    _submit_with_keyboard(browser)
    _wait(browser, lambda d: d.find_element(By.ID, "answer").get_attribute("data-alternatives") in ("none", "done"))


def test_sequential_page_shows_the_ordered_steps(browser):
    """A sequential run (German CSCF world, the no-learning lookahead policy): the steps in order,
    each with its cost and the record after it, as the API answers them."""
    from types import SimpleNamespace

    from selenium.webdriver.common.by import By

    import learners.registry  # noqa: F401
    from data_gen.sequential_worlds import build_sequential, rejected_agents
    from learners.base import build_generator
    from learners.policies.sequential import sequential_context
    from serving.sequential import SequentialService, create_sequential_app

    b = build_sequential("german")
    X = rejected_agents(b, 12, split="all")
    pol = build_generator("seq_lookahead", {"depth": 1}).fit(SimpleNamespace(X=X), None, sequential_context(b.world))
    svc = SequentialService("seq_run", "lookahead1", None, world=b.world, policies={"lookahead1": pol},
                            encoder=b.data.encoder, config={"name": "seq", "sequencer_generations": 3})
    with served(create_sequential_app("unused", service=svc)) as url:
        _example_and_answer(browser, url)
        record = _form_record(browser)
        api = httpx.post(url + "/recommend", json=record).json()
    assert api["status"] == "ok" and api["steps"]
    steps = browser.find_elements(By.CSS_SELECTOR, "ol.steps > li.step")
    assert [s.get_attribute("data-action") for s in steps] == [s["action"] for s in api["steps"]]
    assert all("cost" in s.text for s in steps)
    assert "Total cost" in _text(browser.find_element(By.CSS_SELECTOR, "#answer-details details"))
    first = api["steps"][0]["changes"][0]
    assert first["feature"].replace("_", " ") in browser.find_element(By.ID, "sentence").text
    _screenshot(browser, "page_sequential.png")
    svc.close()


def test_capability_page_shows_the_actions(browser, tmp_path_factory):
    """A capability run (the synthetic serving run of tests/serving_run.py): checkboxes and the
    group, the actions recommended, as the API answers them."""
    from selenium.webdriver.common.by import By

    from serving.app import create_app
    from tests.serving_run import table_generator_registered, train_run

    with table_generator_registered():
        app = create_app(train_run(tmp_path_factory.mktemp("cap"), knn=False), model="table")
        with served(app) as url:
            _example_and_answer(browser, url)
            x = browser.execute_script(
                "return [...document.querySelectorAll('#fields input[type=checkbox]')].map(c => c.checked ? 1 : 0)")
            group = browser.execute_script("return JSON.parse(document.querySelector('#fields select').value)")
            api = httpx.post(url + "/recommend", json={"x": x, "group": group}).json()
    shown = [li.get_attribute("data-action") for li in browser.find_elements(By.CSS_SELECTOR, "#result ol.actions li")]
    assert shown == [a["name"] for a in api["actions"]] and api["status"] in ("ok", "no_recourse", "unknown")
    assert browser.find_element(By.ID, "sentence").text.startswith("Take " if api["actions"] else "")
    assert not browser.find_element(By.ID, "diverse-field").is_displayed()  # no alternatives for this kind
    _screenshot(browser, "page_capability.png")
