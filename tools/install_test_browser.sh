#!/usr/bin/env bash
# Installs the headless browser the HTML-report test uses (tests/test_report_html.py):
# Chromium from Debian's packages, /usr/bin/chromium. Idempotent: does nothing when it is
# there. Uses apt-get as root, else through sudo when that works without a password.
# Never fails the caller: where nothing can be installed it says so, and the browser test
# skips naming this script.
set -u
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_test_browser: no apt-get here; the browser test will be skipped" >&2
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    run=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    run=(sudo -n)
else
    echo "install_test_browser: not root and no password-less sudo; the browser test will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { "${run[@]}" apt-get update -qq && "${run[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    echo "install_test_browser: apt-get could not install chromium; the browser test will be skipped" >&2
fi
exit 0
