"""The HTML report renders in headless Debian chromium: a screenshot, no console error, no request.

chromium is installed by scripts/install_test_deps.sh (called by scripts/test.sh). Console
messages come from --enable-logging=stderr (lines "CONSOLE"); requests from the NetLog
(--log-net-log): any URL request whose isolation key is the page's file:// site came from the
page. The browser's own background traffic goes to a dead local proxy and is not counted.
A deliberately broken page checks that both detectors fire.
"""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

from cli_util import EXAMPLE, needs_shared, run, shared

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-default-apps",
         "--no-pings", "--proxy-server=socks5://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def render(page, width=1200, height=2400):
    """Renders `page`; returns (png path, console lines, page request URLs)."""
    d = tempfile.mkdtemp(prefix="neusight-chromium-")
    png, netlog = os.path.join(d, "shot.png"), os.path.join(d, "net.json")
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={os.path.join(d, 'profile')}", f"--log-net-log={netlog}",
           f"--screenshot={png}", f"--window-size={width},{height}", "file://" + os.path.abspath(page)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    requests = []
    if os.path.exists(netlog):
        with open(netlog) as f:
            text = f.read()
        try:
            log = json.loads(text)
        except json.JSONDecodeError:  # a log cut short at exit: close it
            log = json.loads(text.rstrip().rstrip(",") + "]}")
        for e in log.get("events", []):
            params = e.get("params", {})
            url, key = params.get("url", ""), str(params.get("network_isolation_key", ""))
            if url and key.startswith("file://") and not url.startswith(("file:", "data:")):
                requests.append(url)
    return png, console, sorted(set(requests)), d


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


@unittest.skipIf(CHROMIUM is None and os.environ.get("NEUSIGHT_ALLOW_NO_BROWSER") == "1",
                 "chromium missing (NEUSIGHT_ALLOW_NO_BROWSER=1)")
class Html(unittest.TestCase):
    def setUp(self):
        self.assertIsNotNone(CHROMIUM, "chromium is not installed: run scripts/install_test_deps.sh")
        self.tmp = tempfile.TemporaryDirectory()
        self.dirs = []

    def tearDown(self):
        self.tmp.cleanup()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def render_ok(self, page, keep=None):
        png, console, requests, d = render(page)
        self.dirs.append(d)
        size = png_size(png) if os.path.exists(png) else None
        self.assertEqual(size, (1200, 2400), "no screenshot")
        self.assertGreater(os.path.getsize(png), 20000, "screenshot looks blank")
        self.assertEqual(console, [], "console messages")
        self.assertEqual(requests, [], "network requests")
        if keep:
            shutil.copy(png, keep)

    def test_detectors_catch_a_broken_page(self):
        bad = os.path.join(self.tmp.name, "bad.html")
        with open(bad, "w") as f:
            f.write('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body><p>x</p>'
                    '<img src="http://127.0.0.1:9/x.png"><script>console.error("boom"); missingFn();</script>'
                    "</body></html>")
        png, console, requests, d = render(bad)
        self.dirs.append(d)
        self.assertTrue(any("boom" in l for l in console), console)
        self.assertTrue(any("missingFn" in l for l in console), console)
        self.assertEqual(requests, ["http://127.0.0.1:9/x.png"])

    def test_report_for_a_gpu_list_renders_cleanly(self):
        page = os.path.join(self.tmp.name, "report.html")
        code, _, err = run(EXAMPLE, "--gpu", "b200,h100,a100", "--batch", "1", "--seq", "256", "--html", page, "--quiet")
        self.assertEqual(code, 0, err)
        with open(page) as f:
            html = f.read()
        for section in ("Time by kernel class", "GPU comparison", "Timeline", "Time per layer", "Roofline on",
                        "Nodes", 'class="sortable"'):
            self.assertIn(section, html)
        self.assertGreater(html.count("<circle"), 50)  # kernels on the roofline
        self.assertGreater(html.count("<tr><td"), 500)  # the node table
        self.render_ok(page, keep=os.environ.get("NEUSIGHT_KEEP_SCREENSHOT"))

    @needs_shared("onnx-models")
    def test_training_report_and_real_model_render(self):
        page = os.path.join(self.tmp.name, "train.html")
        code, _, err = run(EXAMPLE, "--gpu", "h100", "--batch", "2", "--seq", "128", "--mode", "training",
                           "--html", page, "--quiet")
        self.assertEqual(code, 0, err)
        with open(page) as f:
            self.assertIn("Training step by phase", f.read())
        self.render_ok(page)
        page = os.path.join(self.tmp.name, "resnet.html")
        code, _, err = run(shared("onnx-models", "onnx_light_resnet50.onnx"), "--gpu", "l4", "--html", page, "--quiet")
        self.assertEqual(code, 0, err)
        self.render_ok(page)

    def test_compare_page_renders(self):
        page = os.path.join(self.tmp.name, "compare.html")
        code, _, err = run("compare", EXAMPLE, EXAMPLE, "--gpu", "b200,l4", "--batch", "1", "--seq", "64",
                           "--html", page, "--quiet")
        self.assertEqual(code, 0, err)
        self.render_ok(page)

    def test_unwritable_html_is_a_runtime_error(self):
        code, _, err = run(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "8", "--html",
                           os.path.join(self.tmp.name, "no", "r.html"), "--quiet")
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
