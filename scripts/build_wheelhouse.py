"""Build a wheelhouse: every file `pip install grm-rlaif[train]` needs on a machine that has CUDA
PyTorch but no network, in files and folders of at most 60 MiB.

Why: the GPU test machines hold CUDA torch (with triton and the nvidia-* libraries) under CPython
3.12, reach no package index, and take at most 64 MiB of uploaded files a call. Run this on a
networked Linux x86_64 machine under the Python the wheels are for (`make wheelhouse`, README
"Offline GPU install"); it uses that interpreter's own pip:

1. resolve `grm-rlaif[train]` (`pip install --dry-run --report`, constrained by constraints.txt),
   then leave out torch and whatever only torch needs: the GPU image has them;
2. `pip wheel --no-deps` each remaining pin: wheels are downloaded, sdist-only packages
   (deepspeed) built here so that the offline machine needs no build tools; grm's own wheel is
   built from a copy of the checkout's files as git lists them (a stale build/ never leaks in);
3. split each file over 60 MiB into `NAME.part-aa`, `-ab`, ... (as `split -b 60M`) and pack every
   file into bins (folders) of at most 60 MiB, one bin an upload: `need-NN` hold the packages the
   GPU image lacks (scripts/gpu_image_packages.txt), `spare-NN` those it has by name;
4. write MANIFEST.sha256 (each whole file), install.sh (scripts/wheelhouse_install.sh: re-join,
   check, `pip install --no-index`), README.txt (what each bin holds) and tiny-smollm2/:
   SmolLM2-135M-Instruct's config and tokenizer without weights, so that a randomly initialised
   model of that architecture can be built offline (`AutoModelForCausalLM.from_config`).

    python3.12 scripts/build_wheelhouse.py [--out wheelhouse] [--model-dir DIR] [--max-mib 60]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement  # the running pip's own parser

ROOT = Path(__file__).resolve().parents[1]
DIST, EXTRAS = "grm-rlaif", "train"
LEFT_TO_IMAGE = "torch"  # the GPU image's own, with everything that only torch needs
IMAGE_PACKAGES = ROOT / "scripts" / "gpu_image_packages.txt"
MODEL = "smollm2-135m-instruct"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
MIB = 1024 * 1024


class BuildError(Exception):
    """A failure reported as one line, without a traceback."""


def canonical(name: str) -> str:
    """PEP 503 name: `Grm_RLAIF` and `grm-rlaif` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_dist(filename: str) -> str:
    """The canonical distribution name of a wheel or wheel part (`grm_rlaif-0.1.0-py3-...`)."""
    return canonical(filename.split("-", 1)[0])


def run(cmd: list[str], cwd: Path | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=cwd).returncode
    if rc:
        raise BuildError(f"exit status {rc}: {' '.join(cmd)}")


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as git lists them (tracked, and untracked but not ignored)."""
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True)
    if r.returncode:
        raise BuildError(f"{ROOT} is not a git checkout: {r.stderr.decode().strip()}")
    for rel in filter(None, r.stdout.decode().split("\0")):
        if (ROOT / rel).is_file():  # a tracked file deleted in the work tree is listed too
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def resolve(src: Path, tmp: Path) -> dict:
    """pip's installation report for `grm-rlaif[train]` from `src`, as if nothing were installed."""
    report = tmp / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    run([*pip, "--report", str(report), "-c", str(ROOT / "constraints.txt"), f"{src}[{EXTRAS}]"])
    return json.loads(report.read_text())


def split_report(report: dict, left_out: str = LEFT_TO_IMAGE) -> tuple[dict[str, str], dict[str, str]]:
    """(kept, left) as name -> version: kept is every package grm reaches without going through
    `left_out` (grm itself included), left is `left_out` and whatever only it needs. Extras are
    followed as the requirement lines ask for them (`ray[default]`): pip reports the extras asked
    for the root alone."""
    items = {canonical(i["metadata"]["name"]): i for i in report["install"]}
    kept = {name for name, req in walk(report, left_out) if req is None}
    version = {n: i["metadata"]["version"] for n, i in items.items()}
    return {n: version[n] for n in sorted(kept)}, {n: version[n] for n in sorted(set(items) - kept)}


def walk(report: dict, left_out: str = LEFT_TO_IMAGE) -> list[tuple[str, Requirement | None]]:
    """``(package, None)`` for every package reached from grm without going through ``left_out``,
    and ``(dependency, requirement)`` for every requirement line of theirs that applies."""
    env = report["environment"]
    items = {canonical(i["metadata"]["name"]): i for i in report["install"]}
    root = canonical(DIST)
    if root not in items:
        raise BuildError(f"pip's report does not install {DIST}")
    seen: set[tuple[str, str]] = set()  # (package, extra): "" for its plain requirements
    found: list[tuple[str, Requirement | None]] = []
    stack = [(root, e) for e in ["", *(items[root].get("requested_extras") or [EXTRAS])]]
    while stack:
        name, extra = stack.pop()
        if (name, extra) in seen or name == left_out:
            continue
        seen.add((name, extra))
        found.append((name, None))
        for line in items[name]["metadata"].get("requires_dist") or []:
            req = Requirement(line)
            dep = canonical(req.name)
            if dep in items and (req.marker is None or req.marker.evaluate({**env, "extra": extra})):
                found.append((dep, req))
                stack.extend((dep, e) for e in ["", *req.extras])
    return found


def on_image(report: dict, image: dict[str, str | None]) -> set[str]:
    """The packages the image holds in a version every requirement on them accepts (a package of
    unrecorded version counts as held): the rest go to the need bins. ray[default] asking for
    aiohttp>=3.14.4 where the image has 3.14.3 stopped the first offline install on a GPU machine."""
    too_old = {
        dep
        for dep, req in walk(report)
        if req is not None and image.get(dep) and not req.specifier.contains(image[dep], prereleases=True)
    }
    return set(image) - too_old


def fetch_wheels(kept: dict[str, str], src: Path, dest: Path) -> list[Path]:
    """One wheel per kept package in `dest`: downloaded, built from an sdist, or grm's from `src`."""
    pins = [f"{n}=={v}" for n, v in kept.items() if n != canonical(DIST)]
    wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dest)]
    run([*wheel, *pins])
    run([*wheel, str(src)])
    files = sorted(dest.glob("*.whl"))
    got = sorted(wheel_dist(f.name) for f in files)
    if got != sorted(kept):
        missing, extra = sorted(set(kept) - set(got)), [n for n in got if n not in kept or got.count(n) > 1]
        raise BuildError(f"wheels do not match the resolution: missing {missing}, extra or twice {extra}")
    return files


def split_file(f: Path, max_bytes: int) -> list[Path]:
    """`f` cut into NAME.part-aa, NAME.part-ab, ... of at most `max_bytes` (as `split -b`); `f` removed."""
    suffixes = ("".join(p) for p in itertools.product(string.ascii_lowercase, repeat=2))
    parts = []
    with f.open("rb") as whole:
        while chunk := whole.read(max_bytes):
            part = f.with_name(f"{f.name}.part-{next(suffixes)}")
            part.write_bytes(chunk)
            parts.append(part)
    f.unlink()
    return parts


def pack(sizes: dict[str, int], capacity: int) -> list[list[str]]:
    """First-fit decreasing: the names into bins whose sizes sum to at most `capacity` each."""
    bins: list[tuple[list[int], list[str]]] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if sizes[name] > capacity:
            raise BuildError(f"{name}: {sizes[name]} bytes do not fit a bin of {capacity}")
        for used, names in bins:
            if used[0] + sizes[name] <= capacity:
                used[0] += sizes[name]
                names.append(name)
                break
        else:
            bins.append(([sizes[name]], [name]))
    return [sorted(names) for _, names in bins]


def image_packages(path: Path = IMAGE_PACKAGES) -> dict[str, str | None]:
    """``name -> version`` (None where the list gives none) of the GPU image's packages."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    pairs = (line.partition("==") for line in lines if line)
    return {canonical(name.strip()): (version.strip() or None) for name, _, version in pairs}


def sha256(f: Path) -> str:
    h = hashlib.sha256()
    with f.open("rb") as fh:
        while block := fh.read(MIB):
            h.update(block)
    return h.hexdigest()


def copy_model(model_dir: Path, dest: Path) -> list[Path]:
    """The model directory's small files (config, tokenizer, chat template), never its weights."""
    if not (model_dir / "config.json").is_file():
        raise BuildError(f"{model_dir}: no config.json; fetch it first: grm models fetch {MODEL} (or make quickstart)")
    dest.mkdir()
    copied = []
    for f in sorted(model_dir.iterdir()):
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES):
            if f.stat().st_size > 16 * MIB:
                raise BuildError(f"{f}: {f.stat().st_size // MIB} MiB is not a config or tokenizer file")
            copied.append(Path(shutil.copy2(f, dest / f.name)))
    return copied


def build(out: Path, model_dir: Path, max_mib: int) -> None:
    started = time.monotonic()
    cap = max_mib * MIB
    if out.exists() and any(out.iterdir()) and not (out / "MANIFEST.sha256").exists():
        raise BuildError(f"{out} exists and is not a wheelhouse: not replacing it")
    stage = out.with_name(out.name + ".tmp")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp_name:
        tmp = Path(tmp_name)
        src = checkout_copy(tmp / "src")
        report = resolve(src, tmp)
        kept, left = split_report(report)
        print(f"left to the machine's torch ({len(left)}): {' '.join(f'{n}=={v}' for n, v in left.items())}")
        wheels = fetch_wheels(kept, src, tmp / "wheels")
        manifest = {f.name: sha256(f) for f in wheels}
        for f in copy_model(model_dir, stage / "tiny-smollm2"):
            manifest[f"tiny-smollm2/{f.name}"] = sha256(f)
        pieces = [p for f in wheels for p in (split_file(f, cap) if f.stat().st_size > cap else [f])]
        have = on_image(report, image_packages())
        bins: dict[str, list[Path]] = {}
        for tier in ("need", "spare"):
            sizes = {p.name: p.stat().st_size for p in pieces if (wheel_dist(p.name) in have) == (tier == "spare")}
            for i, names in enumerate(pack(sizes, cap), 1):
                folder = stage / f"{tier}-{i:02d}"
                folder.mkdir()
                bins[folder.name] = [Path(shutil.move(str(tmp / "wheels" / n), folder / n)) for n in names]
    (stage / "MANIFEST.sha256").write_text("".join(f"{h}  {name}\n" for name, h in sorted(manifest.items())))
    shutil.copy2(ROOT / "scripts" / "wheelhouse_install.sh", stage / "install.sh")
    (stage / "install.sh").chmod(0o755)
    (stage / "README.txt").write_text(readme(bins, left, max_mib))
    shutil.rmtree(out, ignore_errors=True)
    stage.rename(out)
    summary(out, wheels, bins, time.monotonic() - started)


def readme(bins: dict[str, list[Path]], left: dict[str, str], max_mib: int) -> str:
    tag = f"CPython {sys.version_info[0]}.{sys.version_info[1]}, {platform.system()} {platform.machine()}"
    lines = [
        f"grm wheelhouse for {tag}: every wheel `pip install grm-rlaif[train]` needs except torch and",
        f"what only torch needs ({', '.join(left)}): the GPU image has those.",
        "Install with no network: bash install.sh   (PYTHON=... picks the interpreter, default python3)",
        f"Each bin (folder) holds at most {max_mib} MiB: carry one per upload. need-NN hold the packages the",
        "GPU image lacks (scripts/gpu_image_packages.txt); spare-NN those it has by name: carry a spare bin",
        "when pip names one of its packages as missing. Keep install.sh and MANIFEST.sha256 beside them.",
        "tiny-smollm2/: SmolLM2-135M-Instruct's config and tokenizer, no weights (random initialisation):",
        "  AutoModelForCausalLM.from_config(AutoConfig.from_pretrained('wheelhouse/tiny-smollm2'))",
        "",
    ]
    for name, files in bins.items():
        mib = sum(f.stat().st_size for f in files) / MIB
        lines.append(f"{name}  {mib:5.1f} MiB  {' '.join(f.name for f in files)}")
    return "\n".join(lines) + "\n"


def summary(out: Path, wheels: list[Path], bins: dict[str, list[Path]], seconds: float) -> None:
    files = [f for f in out.rglob("*") if f.is_file()]
    largest = max(files, key=lambda f: f.stat().st_size)
    parts = [f for f in files if ".whl.part-" in f.name]
    print(f"{out}: {sum(f.stat().st_size for f in files) / MIB:.1f} MiB in {len(files)} files")
    print(f"  {len(wheels)} wheels, {len(parts)} parts of split wheels, bins: {' '.join(bins)}")
    print(f"  largest file {largest.relative_to(out)} ({largest.stat().st_size / MIB:.1f} MiB); built in {seconds:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "wheelhouse", help="the wheelhouse folder (replaced)")
    # grm's store layout ($GRM_HOME/models/NAME, grm/models/store.py), read without importing grm
    home = Path(os.environ.get("GRM_HOME", Path.home() / ".cache" / "grm")).expanduser()
    p.add_argument("--model-dir", type=Path, default=home / "models" / MODEL, help="SmolLM2 as grm stores it")
    p.add_argument("--max-mib", type=int, default=60, help="the largest file and bin, MiB (uploads: 64 MiB)")
    args = p.parse_args(argv)
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        print("build_wheelhouse: the wheels are for Linux x86_64: run this there", file=sys.stderr)
        return 2
    try:
        build(args.out.resolve(), args.model_dir, args.max_mib)
    except BuildError as e:
        print(f"build_wheelhouse: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
