"""The chat page in a real browser (headless Debian chromium through selenium): send a message, see the
reply stream in piece by piece, and find the final text equal to the API's answer."""

import shutil

import pytest

pytestmark = pytest.mark.slow

webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("the browser test needs chromium and chromedriver (apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

RECORD_SNAPSHOTS = """
window.snapshots = [];
new MutationObserver(() => {
  const replies = document.querySelectorAll('.msg.assistant');
  if (replies.length) window.snapshots.push(replies[replies.length - 1].textContent);
}).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
"""


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def open_page(browser, server, max_tokens: int) -> WebDriverWait:
    """The chat page of ``server``, once it knows the model, with ``max_tokens`` set; a 60 s waiter."""
    browser.get(server.url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_element(By.ID, "model").get_attribute("value") == "smollm2")
    field = browser.find_element(By.ID, "max_tokens")
    field.clear()
    field.send_keys(str(max_tokens))
    return wait


def test_page_streams_the_apis_answer(serve, smollm2, browser):
    server = serve(smollm2, "smollm2")
    question = "What is the capital of France?"
    want = server.client().chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": question}], max_tokens=48,
        temperature=0).choices[0].message.content
    wait = open_page(browser, server, max_tokens=48)
    browser.execute_script(RECORD_SNAPSHOTS)
    browser.find_element(By.ID, "prompt").send_keys(question)
    browser.find_element(By.ID, "send").click()
    reply = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant[data-done='true']"))
    assert reply.text.strip() == want.strip()
    assert "error" not in reply.get_attribute("class")
    snapshots = [s for s in browser.execute_script("return window.snapshots") if s]
    partial = {s for s in snapshots if s != reply.get_attribute("textContent")}
    assert len(partial) >= 3 and all(want.startswith(s) for s in partial)  # it grew piece by piece
    assert int(reply.get_attribute("data-pieces")) > 3


def test_stop_button_cancels_the_reply(serve, smollm2, browser):
    server = serve(smollm2, "smollm2")
    wait = open_page(browser, server, max_tokens=2000)
    browser.find_element(By.ID, "prompt").send_keys("Write a very long story about a lighthouse keeper.")
    browser.find_element(By.ID, "send").click()
    wait.until(lambda d: int(d.find_element(By.CSS_SELECTOR, ".msg.assistant").get_attribute("data-pieces") or 0) >= 3)
    browser.find_element(By.ID, "stop").click()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant[data-done='true']"))
    assert browser.find_element(By.ID, "status").text == "stopped"
    m = server.wait_idle()
    assert m["volvox_cancelled_sequences_total"] == 1 and m["volvox_kv_caches_alive"] == 0
