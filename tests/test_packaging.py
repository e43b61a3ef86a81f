"""The distribution: its name, one version, the data files the wheel must carry.

The wheel itself is built, installed and run by tools/check_wheel.sh (CI's last step)."""
import fnmatch
import importlib.metadata
import re
from pathlib import Path

import pytest

import lab

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
DIST = "cedl-lab"  # "lab" on PyPI is another project


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_distribution_name_and_single_version():
    cfg = pyproject()
    assert cfg["project"]["name"] == DIST
    assert "version" not in cfg["project"] and "version" in cfg["project"]["dynamic"]
    assert cfg["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lab.__version__"}
    try:
        installed = importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{DIST} is not installed: pip install -e . (after pip uninstall lab)")
    assert installed == lab.__version__, "reinstall after a version change: pip install -e ."


def test_changelog_starts_at_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## (\S+)", text, re.M).group(1)
    assert first == lab.__version__


def test_every_data_file_of_lab_is_package_data():
    """Every file under lab/ that is not Python source is named by a package-data pattern
    (lab.compress.native compiles compress/kernels.c, which includes the other kernels*.c,
    from the installed package)."""
    patterns = pyproject()["tool"]["setuptools"]["package-data"]["lab"]
    assert "compress/kernels*.c" in patterns
    pkg = ROOT / "lab"
    data = [p.relative_to(pkg).as_posix() for p in pkg.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert {"compress/kernels.c", "compress/kernels_small.c", "compress/kernels_select.c"} <= set(data)
    missing = [f for f in data if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"files under lab/ the wheel would leave out: {missing}"
