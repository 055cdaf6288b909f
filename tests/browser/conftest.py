"""The browser test is not part of `make test` (it needs Chromium and takes minutes):
`make test-browser` sets MGPUKIT_BROWSER_TEST=1, and only then is it collected."""
import os

if os.environ.get("MGPUKIT_BROWSER_TEST") != "1":
    collect_ignore_glob = ["test_*.py"]
