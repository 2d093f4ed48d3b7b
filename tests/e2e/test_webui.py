"""The chat page (GET /) in a real browser: headless Chromium driven by Selenium against a real
`cobatch serve`. What a user would notice: the model's name, an answer that streams in and says its
speed, Stop, the conversations kept across a reload, the API key and its errors; then the page's
headers over plain HTTP, and --no-webui."""
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import Server

SLOW = 3 if os.environ.get("COBATCH_SANITIZED") else 1
KEY = "webui-test-key"
SPEED = re.compile(r"\d+ tokens? \u00b7 \d+\.\d tok/s")

# the last answer as the page shows it
LAST_ANSWER = """
const a = [...document.querySelectorAll('#messages .msg.assistant')].pop();
return a ? {text: a.querySelector('.text').textContent, done: a.dataset.done === '1',
            speed: a.querySelector('.speed').textContent, error: a.classList.contains('error')}
         : {text: '', done: false, speed: '', error: false};"""
# every length the last answer's text had while it was not done
WATCH_GROWTH = """
window.seenLengths = [];
const box = document.getElementById('messages');
new MutationObserver(() => {
  const a = [...box.querySelectorAll('.msg.assistant')].pop();
  if (a && a.dataset.done !== '1') window.seenLengths.push(a.querySelector('.text').textContent.length);
}).observe(box, {subtree: true, childList: true, characterData: true});"""
MESSAGES = """
return [...document.querySelectorAll('#messages .msg')].map(
  m => [m.classList.contains('user') ? 'user' : 'assistant', m.querySelector('.text').textContent]);"""


def browser_paths():
    """Debian's chromium and chromium-driver; CI installs them (scripts/deps.sh), so a missing one
    fails the test rather than skipping it."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium:
        pytest.fail("no chromium on PATH: install Debian's 'chromium' package (scripts/deps.sh does)")
    if not driver:
        pytest.fail("no chromedriver on PATH: install Debian's 'chromium-driver' package (scripts/deps.sh does)")
    return chromium, driver


@pytest.fixture(scope="module")
def browser():
    chromium, driver = browser_paths()
    profile = tempfile.mkdtemp(prefix="cobatch-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--disable-extensions", "--window-size=1200,900", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def get(url, method="GET", headers=None):
    """(status, headers, body) without raising on an error status."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def model_name(url, key=None):
    status, _, body = get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"} if key else None)
    assert status == 200, body
    return json.loads(body)["data"][0]["id"]


def wait(d, pred, what, timeout=30):
    WebDriverWait(d, timeout * SLOW, poll_frequency=0.05).until(lambda _: pred(), message=what)


def last(d):
    return d.execute_script(LAST_ANSWER)


def text_of(d, element_id):
    return d.find_element(By.ID, element_id).text


def fill(d, element_id, value):
    el = d.find_element(By.ID, element_id)
    el.clear()
    el.send_keys(value)


def ask(d, prompt, max_tokens):
    fill(d, "temperature", "0")
    fill(d, "max-tokens", str(max_tokens))
    fill(d, "input", prompt)
    d.find_element(By.ID, "send").click()


def ready(d):
    """The page takes the next message: Send on, Stop off."""
    return d.find_element(By.ID, "send").is_enabled() and not d.find_element(By.ID, "stop").is_enabled()


def answered(d, n_answers):
    wait(d, lambda: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")) == n_answers
         and last(d)["done"], f"answer {n_answers} to be done", timeout=60)
    return last(d)


def test_page_headers(server):
    status, h, body = get(server.url + "/")
    assert status == 200
    assert h["Content-Type"] == "text/html; charset=utf-8"
    csp = h["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp, csp
    assert "http" not in csp and "*" not in csp, csp
    assert h["X-Content-Type-Options"] == "nosniff"
    assert h["Cache-Control"] == "no-cache"
    page = body.decode("utf-8")
    assert 'id="input"' in page and "/v1/chat/completions" in page
    # nothing to fetch from elsewhere: no scripts, styles, fonts or images by URL
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    assert get(server.url + "/index.html")[2] == body
    assert get(server.url + "/?from=bookmark")[2] == body
    assert get(server.url + "/", method="POST")[0] == 405


def test_chat_in_browser(server, browser):
    d = browser
    d.get(server.url + "/")
    name = model_name(server.url)
    wait(d, lambda: text_of(d, "model") == name, f"the model's name {name!r}")
    assert ready(d)

    # an answer streams in: its text grows while it is not done, then it is done with its speed
    d.execute_script(WATCH_GROWTH)
    ask(d, "Write three sentences about the sea.", 48)
    a = answered(d, 1)
    assert a["text"].strip() and not a["error"], a
    seen = [n for n in d.execute_script("return window.seenLengths") if n > 0]
    assert len(set(seen)) >= 2 and seen == sorted(seen), f"the answer did not stream in: lengths {seen}"
    assert SPEED.search(a["speed"]), a["speed"]
    assert ready(d) and d.find_element(By.ID, "input").get_attribute("value") == ""
    assert d.execute_script(MESSAGES)[0] == ["user", "Write three sentences about the sea."]

    first = d.execute_script(MESSAGES)

    # a new chat is empty and listed above the first
    d.find_element(By.ID, "new-chat").click()
    wait(d, lambda: d.execute_script(MESSAGES) == [], "an empty new chat")
    chats = d.find_elements(By.CSS_SELECTOR, "#chats li")
    assert len(chats) == 2 and "active" in chats[0].get_attribute("class")

    # Stop: the answer stops growing, the server cancels it, the page takes the next message
    gone = server.metrics().get("cobatch:client_gone_total", 0)
    ask(d, "Write a long story about a dragon, at least 1000 words.", 400)  # 400 tokens here, greedy
    wait(d, lambda: len(last(d)["text"]) > 20 and not last(d)["done"], "a long answer to begin")
    d.find_element(By.ID, "stop").click()
    wait(d, lambda: last(d)["done"], "Stop to end the answer", timeout=5)
    stopped = last(d)
    time.sleep(1.5)
    assert last(d)["text"] == stopped["text"], "the answer grew after Stop"
    assert stopped["speed"].startswith("stopped"), stopped
    assert ready(d)
    wait(d, lambda: server.metrics().get("cobatch:client_gone_total", 0) > gone, "the server to cancel the answer")
    ask(d, "Say hello to <b>me</b> & <img src=x>.", 8)  # text stays text: no markup from a message
    assert answered(d, 2)["text"].strip()
    assert d.execute_script(MESSAGES)[2] == ["user", "Say hello to <b>me</b> & <img src=x>."]
    assert not d.find_elements(By.CSS_SELECTOR, "#messages b, #messages img")

    # the copy button puts the answer on the clipboard
    d.execute_cdp_cmd("Browser.grantPermissions", {"origin": server.url,
                                                   "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .copy")[0].click()
    wait(d, lambda: d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .copy")[0].text == "Copied",
         "the copy button to say Copied", timeout=5)
    clip = d.execute_async_script("navigator.clipboard.readText().then(arguments[0], e => arguments[0]('! ' + e))")
    assert clip == stopped["text"], clip

    # a reload finds both chats, the open one open; switching shows the other; deleting one keeps the other
    second = d.execute_script(MESSAGES)
    assert len(second) == 4
    d.refresh()
    wait(d, lambda: d.execute_script(MESSAGES) == second, "the open chat after a reload")
    chats = d.find_elements(By.CSS_SELECTOR, "#chats li")
    assert len(chats) == 2 and "active" in chats[0].get_attribute("class")
    chats[1].find_element(By.CSS_SELECTOR, ".open").click()
    wait(d, lambda: d.execute_script(MESSAGES) == first, "the first chat again")
    d.find_elements(By.CSS_SELECTOR, "#chats li")[0].find_element(By.CSS_SELECTOR, ".delete").click()
    wait(d, lambda: len(d.find_elements(By.CSS_SELECTOR, "#chats li")) == 1, "the second chat deleted")
    d.refresh()
    wait(d, lambda: d.execute_script(MESSAGES) == first, "the first chat after deleting the second")
    assert len(d.find_elements(By.CSS_SELECTOR, "#chats li")) == 1

    # the policy blocked nothing the page does
    blocked = [e["message"] for e in d.get_log("browser") if "Content Security Policy" in e["message"]]
    assert not blocked, blocked


def test_api_key_in_browser(browser):
    s = Server("--api-key", KEY, "--max-num-seqs", "4")
    try:
        d = browser
        assert get(s.url + "/")[0] == 200  # the page is public; its API calls are not
        d.get(s.url + "/")
        wait(d, lambda: "401" in text_of(d, "model"), "the model's name to be refused without the key")
        ask(d, "Hello!", 8)
        a = answered(d, 1)
        assert a["error"] and "401" in a["text"] and "API key" in a["text"], a
        error = text_of(d, "error")
        assert "401" in error and "a valid API key is required" in error, error
        assert ready(d) and d.find_element(By.ID, "input").get_attribute("value") == "Hello!"
        fill(d, "api-key", KEY)
        d.find_element(By.ID, "send").click()
        a = answered(d, 2)
        assert not a["error"] and a["text"].strip() and SPEED.search(a["speed"]), a
        assert text_of(d, "error") == ""
        wait(d, lambda: text_of(d, "model") == model_name(s.url, KEY), "the model's name with the key")
        d.refresh()  # the key is kept in the browser
        wait(d, lambda: d.find_element(By.ID, "api-key").get_attribute("value") == KEY, "the key after a reload")
    finally:
        assert s.stop() == 0, s.logs()


def test_no_webui():
    s = Server("--no-webui", "--max-num-seqs", "4")
    try:
        for path in ("/", "/index.html"):
            status, h, body = get(s.url + path)
            assert status == 404 and h["Content-Type"] == "application/json", (path, status, body)
            assert "no route for" in json.loads(body)["error"]["message"]
        assert get(s.url + "/health")[0] == 200
    finally:
        assert s.stop() == 0, s.logs()
