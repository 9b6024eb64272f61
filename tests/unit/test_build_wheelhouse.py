"""scripts/build_wheelhouse.py without the network: what is left to the GPU image's torch, how
files are split and packed into bins of at most the upload size, and install.sh re-joining them."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.beside import script

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def wh():
    with script("scripts", "build_wheelhouse") as module:
        yield module


def item(name, version, requires=(), extras=None):
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}, "requested_extras": extras}


ENV = {"python_version": "3.12", "sys_platform": "linux", "platform_machine": "x86_64"}


def test_torch_and_what_only_torch_needs_are_left_out(wh):
    report = {
        "environment": ENV,
        "install": [
            item("grm_rlaif", "0.1.0", ["torch>=2.3", "Jinja2>=3.1", 'deepspeed>=0.15; extra == "train"'], ["train"]),
            item("torch", "2.13.0", ["jinja2", "sympy", 'nvidia-cublas==13.1; platform_system == "Linux"', "triton"]),
            item("Jinja2", "3.1.6", ["MarkupSafe>=2"]),
            item("markupsafe", "3.0.3"),
            item("sympy", "1.14.0", ["mpmath"]),
            item("mpmath", "1.3.0"),
            item("nvidia-cublas", "13.1.0"),
            item("triton", "3.6.0"),
            item("deepspeed", "0.19.8", ["nvidia-ml-py", "torch", 'tomli; python_version < "3.11"']),
            item("nvidia-ml-py", "13.580.82"),
            item("tomli", "2.3.0"),  # resolved for nobody here: its marker is false on 3.12
        ],
    }
    kept, left = wh.split_report(report)
    assert kept == {
        "deepspeed": "0.19.8",
        "grm-rlaif": "0.1.0",
        "jinja2": "3.1.6",
        "markupsafe": "3.0.3",
        "nvidia-ml-py": "13.580.82",  # deepspeed's own need, not torch's: the wheelhouse carries it
    }
    assert set(left) == {"torch", "sympy", "mpmath", "nvidia-cublas", "triton", "tomli"}


def test_extras_are_followed_as_requirement_lines_ask_for_them(wh):
    """pip reports requested extras for the root alone: ray[default]'s extra comes from grm's line."""
    report = {
        "environment": ENV,
        "install": [
            item("grm-rlaif", "0.1.0", ['ray[default]>=2.30; extra == "train"', 'trl; extra == "peer"'], ["train"]),
            item("ray", "2.60.0", ["click", 'aiohttp>=3.7; extra == "default"', 'memray; extra == "observability"']),
            item("click", "8.5.1"),
            item("aiohttp", "3.14.5"),
            item("memray", "1.0"),
            item("trl", "1.16.0"),
        ],
    }
    kept, left = wh.split_report(report)
    assert set(kept) == {"grm-rlaif", "ray", "click", "aiohttp"}
    assert set(left) == {"memray", "trl"}


def test_split_file_parts_rejoin_to_the_whole(wh, tmp_path):
    data = bytes(range(256)) * 41  # 10,496 bytes: parts of 4,000, 4,000, 2,496
    f = tmp_path / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
    f.write_bytes(data)
    parts = wh.split_file(f, 4000)
    assert [p.name.rsplit(".", 1)[1] for p in parts] == ["part-aa", "part-ab", "part-ac"]
    assert [p.stat().st_size for p in parts] == [4000, 4000, 2496]
    assert not f.exists()
    assert b"".join(p.read_bytes() for p in parts) == data
    assert wh.wheel_dist(parts[1].name) == "ray"


def test_pack_fills_bins_up_to_capacity_and_refuses_an_oversized_file(wh):
    sizes = {"a": 60, "b": 50, "c": 10, "d": 30, "e": 25, "f": 5}
    bins = wh.pack(sizes, 60)
    assert sorted(n for b in bins for n in b) == sorted(sizes)
    assert all(sum(sizes[n] for n in b) <= 60 for b in bins)
    assert len(bins) == 3  # 180 bytes: three full bins of 60
    with pytest.raises(wh.BuildError, match="do not fit"):
        wh.pack({"big": 61}, 60)


def test_image_package_names_are_canonical(wh, tmp_path):
    f = tmp_path / "have.txt"
    f.write_text("# comment\nPyYAML\nhuggingface_hub  # trailing\n\n")
    assert wh.image_packages(f) == {"pyyaml": None, "huggingface-hub": None}
    shipped = wh.image_packages()
    assert {"torch", "transformers", "numpy"} <= set(shipped) and shipped["aiohttp"] == "3.14.3"


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU coreutils")
def test_install_sh_rejoins_parts_across_bins_and_checks_them(wh, tmp_path):
    """A split wheel whose parts sit in two bins is re-joined in order and matches the manifest;
    a part whose bin was not carried makes install.sh stop before pip runs."""
    house = tmp_path / "wheelhouse"
    data = b"x" * 5000 + b"y" * 5000 + b"z" * 100
    whole = tmp_path / "big-1.0-py3-none-any.whl"
    whole.write_bytes(data)
    parts = wh.split_file(whole, 5000)
    for part, folder in zip(parts, ["need-02", "need-01", "spare-01"], strict=True):
        (house / folder).mkdir(parents=True)
        part.rename(house / folder / part.name)
    (house / "need-01" / "small-2.0-py3-none-any.whl").write_bytes(b"small")
    manifest = {"big-1.0-py3-none-any.whl": data, "small-2.0-py3-none-any.whl": b"small"}
    (house / "MANIFEST.sha256").write_text("".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in manifest.items()))
    shutil.copy(SCRIPTS / "wheelhouse_install.sh", house / "install.sh")
    fake_python = tmp_path / "python"  # records the pip call instead of installing
    fake_python.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/pip-args\n')
    fake_python.chmod(0o755)

    r = subprocess.run(
        ["bash", str(house / "install.sh"), "-q"],
        env={"PYTHON": str(fake_python), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (house / ".flat" / "big-1.0-py3-none-any.whl").read_bytes() == data
    args = (tmp_path / "pip-args").read_text().split()
    assert args[:4] == ["-m", "pip", "install", "--no-index"] and "grm-rlaif[train]" in args and args[-1] == "-q"

    (tmp_path / "pip-args").unlink()
    shutil.rmtree(house / "spare-01")  # the last part's bin not carried
    r = subprocess.run(
        ["bash", str(house / "install.sh")],
        env={"PYTHON": str(fake_python), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "MANIFEST.sha256" in r.stderr
    assert not (tmp_path / "pip-args").exists()


def test_an_image_package_too_old_for_a_requirement_goes_to_the_need_bins(wh, tmp_path):
    report = {
        "environment": ENV,
        "install": [
            item("grm_rlaif", "0.1.0", ['ray[default]>=2.30; extra == "train"', "numpy", "PyYAML>=6"], ["train"]),
            item("ray", "2.60.0", ['aiohttp>=3.14.4; extra == "default"', 'pandas>=9; extra == "data"', "pyyaml"]),
            item("aiohttp", "3.14.5"),
            item("numpy", "2.5.5"),
            item("pyyaml", "6.0.4"),
            item("pandas", "3.1.1"),
        ],
    }
    f = tmp_path / "image.txt"
    f.write_text("aiohttp==3.14.3\nnumpy  # version not recorded\nPyYAML==6.0.3\npandas==3.0.6\n")
    image = wh.image_packages(f)
    assert image == {"aiohttp": "3.14.3", "numpy": None, "pyyaml": "6.0.3", "pandas": "3.0.6"}
    # aiohttp: ray[default] asks for >=3.14.4; pandas: only ray[data] (not asked for) wants a newer one
    assert wh.on_image(report, image) == {"numpy", "pyyaml", "pandas"}
