"""A plain wheel carries the declarative library, so builtin:NAME works after `pip install`."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_builtin_assets(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("grm_rlaif-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for kind, pattern in (("judges", "*.yaml"), ("prompts", "*.j2"), ("policy", "*.yaml"), ("pipelines", "*.yaml")):
        for f in (ROOT / kind).glob(pattern):
            assert f"grm/_builtin/{kind}/{f.name}" in names, f
    assert "grm/_builtin/judges/fixtures/helpfulness-pointwise.json" in names
    assert "grm/cli.py" in names
    for f in (ROOT / "grm" / "view" / "static").iterdir():  # grm view's page: served from the package
        assert f"grm/view/static/{f.name}" in names, f

    # Installed without a checkout around it, builtin: resolves inside the package.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = "from grm.config.paths import resolve_builtin; p = resolve_builtin('helpfulness-pointwise', 'judges');print(p)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(site / "grm" / "_builtin" / "judges" / "helpfulness-pointwise.yaml")
