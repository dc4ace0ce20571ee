#!/bin/sh
# The system programs the tests use: installed with apt-get when run as root on Debian or
# Ubuntu, named with the command to install them otherwise.
#
#   scripts/install-test-deps.sh VENV_PYTHON
#
# Ubuntu ships Chromium only as a snap (its apt package `chromium` does not exist and
# `chromium-browser` asks for snapd), and one package apt cannot find failed the whole
# `apt-get install`: so packages are installed when this system's apt sources have them, and
# without Debian's /usr/bin/chromium the browser tests use the Chromium build Playwright fetches
# (or are skipped, saying why, when it cannot be fetched).
set -eu

PY=${1:?usage: $0 VENV_PYTHON}
PACKAGES="espeak-ng sox libsox-fmt-all iproute2 util-linux postgresql chromium nodejs redis-server strace"
# the page in WebKit (tests/web/test_webkit.py): WebKitGTK's WebDriver (it brings WebKitGTK and
# its MiniBrowser) and an X server without a screen, as WebKitGTK has no headless mode
PACKAGES="$PACKAGES webkit2gtk-driver xvfb"
# the programs behind them, for systems without apt (chromium and node are optional there)
COMMANDS="espeak-ng sox ip unshare redis-server strace"

root() { [ "$(id -u)" = 0 ]; }

if command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  # The page in a second browser engine (tests/web/test_firefox.py), a test only root runs:
  # Debian's Firefox ESR (Ubuntu has Firefox only as a snap: not in its apt sources, skipped,
  # as the test is) and a sound server for its Web Audio. PulseAudio would replace a desktop's
  # PipeWire sound server, so only where there is none.
  if root; then
    PACKAGES="$PACKAGES firefox-esr"
    dpkg -s pipewire-pulse >/dev/null 2>&1 || PACKAGES="$PACKAGES pulseaudio"
  fi
  missing=""
  for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    if root; then apt-get update -qq; fi
    available="" unavailable=""
    for p in $missing; do
      if apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]'; then
        available="$available $p"
      else
        unavailable="$unavailable $p"
      fi
    done
    [ -z "$unavailable" ] || echo "not in this system's apt sources, skipped:$unavailable" >&2
    if [ -n "$available" ]; then
      if ! root; then
        echo "please install:$available (sudo apt-get install$available)" >&2
        exit 1
      fi
      echo "installing apt packages:$available"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $available
    fi
  fi
else
  absent=""
  for c in $COMMANDS; do command -v "$c" >/dev/null 2>&1 || absent="$absent $c"; done
  command -v initdb >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1 ||
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || absent="$absent initdb(postgresql)"
  if [ -n "$absent" ]; then
    echo "not a Debian or Ubuntu system: please install, with its package manager:$absent" >&2
    exit 1
  fi
fi

# a headless Chromium for the browser tests (tests/web/conftest.py finds either)
if [ ! -x /usr/bin/chromium ] && ! ls "${PLAYWRIGHT_BROWSERS_PATH:-$HOME/.cache/ms-playwright}"/chromium-*/chrome-linux*/chrome >/dev/null 2>&1; then
  echo "no /usr/bin/chromium: fetching Playwright's Chromium build for the browser tests" >&2
  if root; then deps=--with-deps; else deps=; fi
  "$PY" -m playwright install $deps chromium ||
    echo "could not fetch it: the browser tests will be skipped" >&2
fi
