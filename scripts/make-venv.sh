#!/bin/sh
# Make the project's venv with a Python 3.11 or newer, saying what to do when that cannot work.
#
#   scripts/make-venv.sh [PYTHON] VENV
#
# Without PYTHON (an empty first argument): python3, or else the newest of python3.13,
# python3.12, python3.11 on PATH (versions every dependency has wheels for). Ubuntu 22.04's
# python3 is 3.10, and its python3.11 package installs beside it.
#
# On Debian and Ubuntu without the python3-venv package, `python3 -m venv` fails after it made
# the folder, leaving a venv without pip that every later `make` took for a good one (and then
# failed on pip); such a venv is made again.
set -eu

[ $# -eq 2 ] || { echo "usage: $0 [PYTHON] VENV" >&2; exit 2; }
PYTHON=$1
VENV=$2

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  exit 0
fi
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if [ -z "$PYTHON" ]; then
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 && new_enough "$candidate"; then
      PYTHON=$candidate
      break
    fi
  done
  if [ -z "$PYTHON" ]; then
    found=$(python3 -V 2>&1) || found="not found"
    echo "voice_server needs Python 3.11 or newer; python3: $found, and no python3.11 to" \
         "python3.13 on PATH." >&2
    echo "Install one (Ubuntu 22.04: sudo apt-get install python3.11 python3.11-venv)," \
         "or name it: make serve PYTHON=/path/to/python3.12" >&2
    exit 1
  fi
  [ "$PYTHON" = python3 ] || echo "python3 is $(python3 -V 2>&1 || echo missing); using $PYTHON"
elif ! new_enough "$PYTHON"; then
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
