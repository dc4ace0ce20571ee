"""The install and test scripts a newcomer's machine runs first (scripts/): each says what is
missing instead of failing deep inside pip or cmake, and the tests' network namespace holds
loopback alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False,
                          **kwargs)


def test_a_python_older_than_3_11_is_named(tmp_path: Path) -> None:
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.13' && exit 0\nexit 1\n")
    old.chmod(0o755)
    proc = _run(str(SCRIPTS / "make-venv.sh"), str(old), str(tmp_path / "venv"))
    assert proc.returncode == 1
    assert "needs Python 3.11 or newer" in proc.stderr and "Python 3.10.13" in proc.stderr
    assert "PYTHON=" in proc.stderr
    assert not (tmp_path / "venv").exists()


def _old_python(folder: Path, name: str = "python3") -> None:
    folder.mkdir(exist_ok=True)
    old = folder / name
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.12' && exit 0\nexit 1\n")
    old.chmod(0o755)


def test_without_a_named_python_a_newer_one_beside_an_old_python3_is_found(
        tmp_path: Path) -> None:
    """Ubuntu 22.04: python3 is 3.10, and `apt install python3.11` puts python3.11 beside it.
    `make serve` names no Python: the venv is made with python3.11, not refused."""
    bin_dir = tmp_path / "bin"
    _old_python(bin_dir)
    (bin_dir / "python3.11").symlink_to(sys.executable)
    venv = tmp_path / "venv"
    proc = _run("/bin/sh", str(SCRIPTS / "make-venv.sh"), "", str(venv),
                env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "python3 is Python 3.10.12; using python3.11" in proc.stdout
    made = _run(str(venv / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])")
    assert made.stdout.strip() == str(tuple(sys.version_info[:2]))


def test_without_any_new_enough_python_the_install_says_how_to_get_one(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _old_python(bin_dir)
    # a PATH with sh and the old python3 alone (no system python3.11 behind it)
    (bin_dir / "sh").symlink_to(shutil.which("sh"))
    proc = _run(str(bin_dir / "sh"), str(SCRIPTS / "make-venv.sh"), "",
                str(tmp_path / "venv"), env={"PATH": str(bin_dir)})
    assert proc.returncode == 1
    assert "python3: Python 3.10.12" in proc.stderr
    assert "sudo apt-get install python3.11 python3.11-venv" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_a_venv_left_without_pip_is_made_again(tmp_path: Path) -> None:
    """What a failed `python3 -m venv` leaves on Debian without python3-venv: the folder and
    its python, no pip. Every later `make` took it for a good venv."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert _run(str(venv / "bin" / "python"), "-m", "pip", "--version").returncode != 0
    proc = _run(str(SCRIPTS / "make-venv.sh"), sys.executable, str(venv))
    assert proc.returncode == 0, proc.stderr
    assert _run(str(venv / "bin" / "python"), "-m", "pip", "--version").returncode == 0


def test_no_compiler_is_said_before_the_llama_build(tmp_path: Path) -> None:
    """With no cached wheel and no C/C++ compiler on PATH, the build stops at once and names
    the packages to install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "ls", "uname", "grep", "cut", "mkdir"):
        if (found := shutil.which(tool)) is not None:
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path),
           "VOICE_SERVER_WHEEL_CACHE": str(tmp_path / "cache")}
    proc = _run(str(bin_dir / "bash"), str(SCRIPTS / "install-llama-cpp.sh"), sys.executable,
                env=env)
    assert proc.returncode == 1
    assert "needs a C and a C++ compiler" in proc.stderr and "build-essential" in proc.stderr
    assert not (tmp_path / "cache").exists()  # nothing fetched or built


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs unshare and ip (util-linux, iproute2)")
def test_the_tests_namespace_has_loopback_alone() -> None:
    proc = _run(str(SCRIPTS / "in-private-netns.sh"), "ip", "-o", "link", "show")
    if proc.returncode != 0 and "namespaces" in proc.stderr:
        pytest.skip(f"no network namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    links = [line.split(":")[1].strip() for line in proc.stdout.splitlines()]
    assert links == ["lo"]
    assert "state UNKNOWN" in proc.stdout or "UP" in proc.stdout  # brought up
    status = _run(str(SCRIPTS / "in-private-netns.sh"), "sh", "-c", "exit 3")
    assert status.returncode == 3

