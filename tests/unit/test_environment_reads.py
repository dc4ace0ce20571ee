"""The process environment is read in voice_server/config.py only (issue 21, item 3)."""

from __future__ import annotations

import ast
from pathlib import Path

import voice_server

PACKAGE = Path(voice_server.__file__).resolve().parent
_ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}
# the one use outside config.py: a worker process inherits the environment (not a settings read)
PASS_THROUGH = {"workers/supervisor.py": 1}


def environment_uses(source: str) -> list[int]:
    """Line numbers of ``os.environ`` / ``os.getenv`` uses and of their ``from os`` imports."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in _ENV_NAMES \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(alias.name in _ENV_NAMES for alias in node.names):
            lines.append(node.lineno)
    return lines


def test_the_scan_sees_every_form():
    """The scan finds attribute reads, calls and ``from os import`` forms."""
    source = ("import os\nfrom os import getenv\na = os.environ['X']\nb = os.getenv('Y')\n"
              "c = {**os.environ}\n")
    assert environment_uses(source) == [2, 3, 4, 5]


def test_only_config_reads_the_environment():
    """No module but config.py (and the supervisor's pass-through to a worker) uses it."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        uses = environment_uses(path.read_text(encoding="utf-8"))
        if uses and name != "config.py":
            found[name] = len(uses)
    assert found == PASS_THROUGH
