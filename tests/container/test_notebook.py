"""The getting-started notebook and JupyterLab as a user meets them: the development container
copies the notebook in (never over a file of its name), the notebook runs green headless
(nbconvert, the way CI checks notebooks), TensorBoard serves its logs, and a real browser
(the distribution's Chromium, driven by Selenium) shows it in JupyterLab with no pop-ups.

The dev container is shared by the tests of this module (started once: Jupyter and the
notebook's run take most of the time) and removed at the end whatever the outcome. Set
BYOC_SCREENSHOT_DIR to keep the browser's screenshot (docs/jupyterlab.png is one).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from tests.container.support import Containers, host_port, logs
from tests.helpers import wait_until

NOTEBOOK = "getting-started.ipynb"
TOKEN = "notebook-test-token-0123456789"
LOOPBACK = {"8888/tcp": ("127.0.0.1", None), "6006/tcp": ("127.0.0.1", None)}


def http_get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


@pytest.fixture(scope="module")
def dev(client, image):
    pool = Containers(client, image)
    try:
        c = pool.start(
            None,
            environment={"JUPYTER_TOKEN": TOKEN, "BYOC_SSHD": "0"},
            ports=LOOPBACK,
            shm_size="1g",
        )
        url = wait_until(
            lambda: (m := re.search(r"http://127\.0\.0\.1:8888(/\S+)", logs(c))) and m.group(1),
            timeout=60,
            what="JupyterLab's URL in the log",
        )
        jupyter, tensorboard = host_port(c, "8888/tcp"), host_port(c, "6006/tcp")
        wait_until(
            lambda: http_get(f"http://127.0.0.1:{jupyter}/api/status?token={TOKEN}")[0] == 200,
            timeout=90,
            what="Jupyter up",
        )
        yield {"container": c, "path": url, "jupyter": jupyter, "tensorboard": tensorboard}
    finally:
        pool.remove_all()


@pytest.fixture(scope="module")
def executed(dev):
    """The notebook run headless in place (outputs kept for the browser), timed, parsed."""
    c = dev["container"]
    started = time.monotonic()
    code, out = c.exec_run(
        [
            "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
            "--ExecutePreprocessor.timeout=600", NOTEBOOK,
        ],
        workdir="/workspace",
    )  # fmt: skip
    seconds = time.monotonic() - started
    print(f"\nnotebook executed headless in {seconds:.1f} s")
    assert code == 0, out.decode(errors="replace")[-4000:]
    _, text = c.exec_run(["cat", f"/workspace/{NOTEBOOK}"])
    return json.loads(text)


def outputs(nb: dict) -> list[dict]:
    return [o for cell in nb["cells"] if cell["cell_type"] == "code" for o in cell["outputs"]]


def text_of(nb: dict) -> str:
    parts = []
    for o in outputs(nb):
        if o["output_type"] == "stream":
            parts.append("".join(o["text"]))
        elif "text/plain" in o.get("data", {}):
            parts.append("".join(o["data"]["text/plain"]))
    return "".join(parts)


def test_the_notebook_is_put_in_the_notebook_root_and_the_log_points_to_it(dev):
    # A given token is not printed: the URL is the notebook's, without a query.
    assert dev["path"] == f"/lab/tree/{NOTEBOOK}"
    c = dev["container"]
    code, out = c.exec_run(["cmp", f"/workspace/{NOTEBOOK}", f"/opt/byoc/notebooks/{NOTEBOOK}"])
    assert code == 0, out
    assert "(start with getting-started.ipynb)" in logs(c)


def test_the_notebook_trains_with_horovod_and_ddp_on_2_processes(executed):
    assert not [o for o in outputs(executed) if o["output_type"] == "error"]
    text = text_of(executed)
    assert "world size: 2" in text, text[-3000:]
    losses = re.findall(r"rank (\d) on cpu: loss ([\d.]+) -> ([\d.]+)", text)
    assert sorted(r for r, _, _ in losses) == ["0", "1"], text[-3000:]
    assert all(float(last) < float(first) / 10 for _, first, last in losses), losses
    # torchrun's 2 ranks, each in a world of 2, and the DDP example's end.
    assert "rank 0/2" in text and "rank 1/2" in text, text[-3000:]
    assert "rank 1: done" in text and "rank 0: done" in text
    # byoc doctor ran and reported the image.
    assert "torch" in text and "horovod" in text.lower()


def test_the_loss_curve_is_an_inline_png(executed):
    pngs = [o for o in outputs(executed) if "image/png" in o.get("data", {})]
    assert len(pngs) == 1
    assert base64.b64decode(pngs[0]["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_tensorboard_serves_the_notebooks_logs(dev, executed):
    text = text_of(executed)
    assert re.search(r"15 values of loss/horovod", text), text[-2000:]
    c = dev["container"]
    code, out = c.exec_run(
        ["sh", "-c", "ls /workspace/runs/getting-started-*/events.out.tfevents.*"]
    )
    assert code == 0 and out.strip(), out
    port = dev["tensorboard"]
    status, body = wait_until(
        lambda: http_get(f"http://127.0.0.1:{port}/"), timeout=60, what="TensorBoard up"
    )
    assert status == 200 and b"TensorBoard" in body
    # TensorBoard reloads its logdir every few seconds: the notebook's run shows up.
    runs = wait_until(
        lambda: [
            r
            for r in json.loads(http_get(f"http://127.0.0.1:{port}/data/runs")[1])
            if r.startswith("getting-started-")
        ],
        timeout=60,
        what="the notebook's run listed by TensorBoard",
    )
    assert runs


def test_mpirun_does_not_hang_beside_tensorboard(dev):
    """hwloc's GL plugin probes X displays over TCP (localhost:6000+N); TensorBoard on 6006
    (display :6) accepted and never answered, so every mpirun in the dev container hung. The
    image turns that plugin off (HWLOC_COMPONENTS=-gl)."""
    code, out = dev["container"].exec_run(
        ["timeout", "-s", "KILL", "60", "mpirun", "--allow-run-as-root", "-np", "2", "true"]
    )
    assert code == 0, f"mpirun beside TensorBoard: exit {code}: {out.decode(errors='replace')}"


def test_a_file_of_that_name_is_never_replaced(containers, tmp_path):
    mine = tmp_path / NOTEBOOK
    mine.write_text("my own notes\n")
    tmp_path.chmod(0o777)
    c = containers.start(
        None,
        environment={"JUPYTER_TOKEN": TOKEN, "BYOC_SSHD": "0", "BYOC_TENSORBOARD": "0"},
        volumes={str(tmp_path): {"bind": "/workspace", "mode": "rw"}},
    )
    wait_until(lambda: "JupyterLab on port" in logs(c), timeout=60, what="Jupyter started")
    assert mine.read_text() == "my own notes\n"
    assert f"/lab/tree/{NOTEBOOK}" in logs(c)  # still the one opened: the user's own
    assert "TensorBoard on port" not in logs(c)


def chromium() -> tuple[str, str]:
    """The distribution's Chromium and its chromedriver, or a skip saying how to get them."""
    browser = next(
        (p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "") if p and
         os.access(p, os.X_OK)),
        None,
    )  # fmt: skip
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        pytest.skip(
            "no Chromium and chromedriver on this machine: `make test-deps` installs the "
            "distribution's (chromium, chromium-driver) as root on Debian"
        )
    return browser, driver


def test_jupyterlab_asks_nothing_and_calls_nowhere(dev):
    """The image's settings: no "Jupyter news?" prompt, no update check, no news feed."""
    base = f"http://127.0.0.1:{dev['jupyter']}/lab/api"
    notification = "settings/@jupyterlab/apputils-extension:notification"
    _, body = http_get(f"{base}/{notification}?token={TOKEN}")
    # The image's overrides.json becomes the schema's defaults; no user settings yet.
    defaults = {k: v.get("default") for k, v in json.loads(body)["schema"]["properties"].items()}
    assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False
    _, body = http_get(f"{base}/news?token={TOKEN}")
    assert json.loads(body)["news"] == []


def test_jupyterlab_shows_the_notebook_in_a_browser(dev, executed, tmp_path):
    browser, driver_path = chromium()
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--no-first-run",
        # Traffic only to the container under test: no updates, sync or safe-browsing calls.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(arg)
    started = time.monotonic()
    with webdriver.Chrome(service=Service(executable_path=driver_path), options=options) as drv:
        drv.set_page_load_timeout(60)
        # The very URL byoc-dev printed, on the published port.
        drv.get(f"http://127.0.0.1:{dev['jupyter']}{dev['path']}?token={TOKEN}")

        def title_rendered():
            for h in drv.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-RenderedMarkdown h1"):
                if "Getting started" in h.text:
                    return h
            return None

        wait_until(title_rendered, timeout=120, interval=0.5, what="the notebook rendered")
        tab = drv.find_element(By.CSS_SELECTOR, ".lm-TabBar-tab.jp-mod-current")
        assert NOTEBOOK in tab.text
        # The run's outputs are there: the loss curve, as the executed notebook holds it.
        plot = wait_until(
            lambda: drv.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img"),
            timeout=60,
            what="the loss curve rendered",
        )[0]
        print(f"\nbrowser: notebook shown in {time.monotonic() - started:.1f} s")
        toasts = [t.text for t in drv.find_elements(By.CSS_SELECTOR, ".Toastify__toast")]
        assert not toasts, f"JupyterLab showed pop-ups: {toasts}"
        drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", plot)
        shot = tmp_path / "jupyterlab.png"
        assert drv.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("BYOC_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / "jupyterlab.png")
