"""Benchmark: key press to next image painted, in Debian's Chromium (under 100 ms).

    .venv/bin/python bench/bench_label_browser.py [--labels 60] [--size 512] [--threads 4]
        [--database-url postgres://postgres@127.0.0.1:5432/biaslab_ui_bench_browser]

Serves the app from the same real HTTP server as bench_label_submit.py (a subprocess: wsgiref
with ``--threads`` worker threads, static files included; never in this process, whose
Playwright driver would compete with it for the GIL) on PostgreSQL over loopback (the
database in the URL is dropped and re-created), logs one annotator in through the login form in headless Chromium
(Playwright, /usr/bin/chromium — never ``playwright install``), and labels ``--labels`` images
of ``--size`` px random-pixel PNGs (about as large as a photograph: ~0.8 MB at 512 px).

Each measurement runs inside the page: ``performance.now()`` just before a ``keydown`` is
dispatched, to the ``label:shown`` event that keys.js fires once the swapped-in image is
decoded and the frame showing it has been painted (requestAnimationFrame, then a task queued
from it). It covers the POST, the server's work, the swap and the paint; the next image was
preloaded by the previous response, as in real use. The server runs with bench/settings_bench.py,
so each POST also reports the server's own time (``Server-Timing``, read from the browser's
resource timing). The load average is printed with the figures: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_label_submit import (
    configure,
    database_url_default,
    make_study,
    percentile,
    recreate_database,
    start_server,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/biaslab_ui_bench_browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

MEASURE_JS = """
async (key) => {
  const before = document.getElementById("current-image").dataset.imageId;
  const shown = new Promise((resolve, reject) => {
    document.addEventListener("label:shown", (e) => resolve(e.detail), { once: true });
    setTimeout(() => reject(new Error("no label:shown within 5 s")), 5000);
  });
  const t0 = performance.now();
  document.dispatchEvent(new KeyboardEvent("keydown", { key: key, bubbles: true }));
  const detail = await shown;
  const ms = performance.now() - t0;
  const posts = performance.getEntriesByType("resource").filter((e) => e.initiatorType === "fetch");
  const post = posts[posts.length - 1];
  performance.clearResourceTimings();
  const app = post && post.serverTiming ? post.serverTiming.find((t) => t.name === "app") : null;
  return {
    ms: ms,
    request: post ? post.duration : null,
    server: app ? app.duration : null,
    before: before,
    after: detail.imageId,
  };
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--labels", type=int, default=60)
    parser.add_argument("--size", type=int, default=512, help="image width and height in pixels")
    parser.add_argument("--threads", type=int, default=4, help="worker threads of the HTTP server")
    parser.add_argument("--database-url", default=database_url_default(DEFAULT_DATABASE_URL))
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are setup only.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

    # The project's settings plus the Server-Timing header (bench/settings_bench.py).
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings_bench"
    recreate_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp:
        media = Path(tmp) / "media"
        configure(args.database_url, media)
        study, (user,) = make_study(
            slug="browser",
            annotators=1,
            n_images=args.labels + 2,
            media_root=media,
            png_size=args.size,
            noise=True,
        )
        from django.db import connection

        connection.close()
        server, address = start_server(args.database_url, media, args.threads)
        base = f"http://{address}"
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/accounts/login/")
            page.fill("input[name=username]", user.username)
            page.fill("input[name=password]", "bench-password-1")
            with page.expect_navigation():
                page.keyboard.press("Enter")
            page.goto(f"{base}/annotate/{study.slug}/label/")
            page.locator("#current-image").wait_for()
            time.sleep(0.5)  # let the first image paint and the preload finish
            timings: list[float] = []
            requests: list[float] = []  # the POST's round trip (fetch resource timing) within it
            server_ms: list[float] = []  # the server's own time for it (Server-Timing app)
            for i in range(args.labels):
                result = page.evaluate(MEASURE_JS, "mf"[i % 2])
                if result["after"] == result["before"]:
                    raise SystemExit(f"the image did not change after key press {i + 1}")
                timings.append(result["ms"])
                requests.append(result["request"] or 0.0)
                if result["server"] is not None:
                    server_ms.append(result["server"])
                time.sleep(0.15)  # a person's pace: the next preload has time to finish
            browser.close()
        server.terminate()
        server.wait(timeout=10)
        from annotate.models import Label

        stored = Label.objects.filter(image__study=study).count()
        print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"key press → next image painted, {len(timings)} labels of {args.size}px images: "
            f"p50 {statistics.median(timings):.1f} ms, p95 {percentile(timings, 95):.1f} ms, "
            f"max {max(timings):.1f} ms; labels stored {stored}"
        )
        print(
            f"  of which the POST round trip (server + loopback): p50 {statistics.median(requests):.1f} ms, "
            f"p95 {percentile(requests, 95):.1f} ms"
        )
        if server_ms:
            print(
                f"  of which server time (Server-Timing app): p50 {statistics.median(server_ms):.1f} ms, "
                f"p95 {percentile(server_ms, 95):.1f} ms"
            )


if __name__ == "__main__":
    main()
