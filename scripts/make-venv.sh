#!/bin/sh
# Make the project's venv with PYTHON (3.11 or newer), saying what to do when that cannot work.
#
#   scripts/make-venv.sh PYTHON VENV
#
# On Debian and Ubuntu without the python3-venv package, `python3 -m venv` fails after it made
# the folder, leaving a venv without pip that every later `make` took for a good one (and then
# failed on pip); such a venv is made again.
set -eu

PYTHON=${1:?usage: $0 PYTHON VENV}
VENV=${2:?usage: $0 PYTHON VENV}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  exit 0
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  found=$("$PYTHON" -V 2>&1) || found="not found"
  echo "voice_server needs Python 3.11 or newer; $PYTHON: $found." >&2
  echo "Name another: make serve PYTHON=python3.12" >&2
  exit 1
fi
rm -rf "$VENV"
if ! "$PYTHON" -m venv "$VENV"; then
  rm -rf "$VENV"
  minor=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  echo "could not make a venv with $PYTHON; on Debian and Ubuntu:" \
       "sudo apt-get install python$minor-venv" >&2
  exit 1
fi
