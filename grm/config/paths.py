"""Resolution of paths inside YAML files: relative to the file, or ``builtin:NAME``.

The shipped library lives at the top of a checkout (``policy/``, ``judges/``, ``prompts/``,
``pipelines/``) and inside an installed wheel as ``grm/_builtin/<kind>/``. ``builtin:NAME`` looks
for ``NAME`` (with the usual suffix added when missing) in the folder of the expected kind; a
reference to a file of any kind (``grm validate builtin:NAME``, kind ``pipelines``) looks in the
others after. A spec's reference never lands in another kind's folder: a judge named
``builtin:quickstart`` is not the quickstart pipeline. A name is one file name of the library
(``grm.config.names``): no separator, ``..``, NUL or escape, and a file found through a link must
lie inside the library too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from grm.config.names import name_problem

KINDS = ("policy", "judges", "prompts", "pipelines")
SUFFIXES = {"policy": ".yaml", "judges": ".yaml", "prompts": ".j2", "pipelines": ".yaml"}

_PKG = Path(__file__).resolve().parents[1]

BUILTIN_DATA_SETS = (
    "arith-pairs",
    "arith-prompts",
    "calc-train",
    "calc-heldout",
    "clarify-train",
    "clarify-heldout",
    "revise-train",
    "revise-heldout",
    "constraints-train",
    "constraints-heldout",
    "constraints-pairs",
    "constraints-lexical-train",
    "constraints-lexical-heldout",
    "constraints-lexical-pairs",
    "constraints-pairs-train",
    "constraints-lexical-pairs-train",
    "constraints-lexical-dev",
    "constraints-lexical-unseen",
    "constraints-lexical-dev-pairs",
    "constraints-quick-train",
    "constraints-quick-heldout",
    "constraints-quick-pairs",
)
"""Names of ``grm.data.builtin``'s generated sets (``builtin:NAME`` as a data source). Listed here so
that validating a config never imports the data package; a unit test keeps the two in step."""

DEFAULT_JUDGES: dict[str, dict[str, str]] = {
    "pairwise": {"*": "pairwise-logprob", "qwen2.5-coder-1.5b-instruct": "pairwise-rules-logprob"},
    "pointwise": {"*": "helpfulness-pointwise-logprob", "qwen2.5-coder-1.5b-instruct": "pointwise-logprob"},
}
"""``builtin:pairwise`` / ``builtin:pointwise``: the built-in judge of that mode chosen per model
from the quality table in judges/README.md ("*": every model without its own entry). The model is
the one named by a ``model=...`` override, else the judge's own default (SmolLM2)."""


def default_judge_ref(ref: str, overrides: Iterable[str] = ()) -> str:
    """``builtin:pairwise``/``builtin:pointwise`` -> ``builtin:<variant>`` for the overridden model;
    any other reference is returned unchanged."""
    mode = ref.removeprefix("builtin:") if ref.startswith("builtin:") else None
    if mode not in DEFAULT_JUDGES:
        return ref
    model = "*"
    for o in overrides:
        key, _, value = o.partition("=")
        if key.strip() == "model":
            model = value.strip().strip("'\"")
    table = DEFAULT_JUDGES[mode]
    return "builtin:" + table.get(model, table["*"])


def builtin_dir(kind: str) -> Path:
    """Folder holding the shipped assets of ``kind`` (checkout first, then installed package data)."""
    if kind not in KINDS:
        raise ValueError(f"unknown asset kind {kind!r}; expected one of {KINDS}")
    checkout = _PKG.parent / kind
    if (_PKG.parent / "pyproject.toml").exists() and checkout.is_dir():
        return checkout
    return _PKG / "_builtin" / kind


def list_builtin(kind: str) -> list[str]:
    folder = builtin_dir(kind)
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob(f"*{SUFFIXES[kind]}"))


def resolve_builtin(name: str, kind: str) -> Path:
    """Path of ``builtin:name``; raises FileNotFoundError naming what exists."""
    if kind == "judges" and name in DEFAULT_JUDGES:
        name = DEFAULT_JUDGES[name]["*"]
    problem = name_problem(name)
    if problem is not None:
        raise FileNotFoundError(f"builtin:{name[:60]!r} is not a builtin name: {problem}")
    if kind not in KINDS:
        order = list(KINDS)
    elif kind == "pipelines":  # a file given to grm validate or grm run: any kind, pipelines first
        order = [kind] + [k for k in KINDS if k != kind]
    else:
        order = [kind]
    for k in order:
        folder = builtin_dir(k)
        for candidate in (folder / name, folder / f"{name}{SUFFIXES[k]}"):
            if candidate.is_file():
                if not candidate.resolve().is_relative_to(folder.resolve()):
                    raise FileNotFoundError(f"builtin:{name} links outside the builtin library ({folder})")
                return candidate
    known = ", ".join(list_builtin(kind) + (sorted(DEFAULT_JUDGES) if kind == "judges" else [])) if kind in KINDS else ""
    raise FileNotFoundError(f"no builtin {kind} named '{name}'" + (f" (known: {known})" if known else ""))


def resolve_path(value: str, base_dir: Path, kind: str) -> Path:
    """Resolve a path written in a YAML file: ``builtin:NAME``, absolute, or relative to the file.
    A spec or template must be a regular file; kind ``pipelines`` (data sources too) may also be a
    directory (a saved data set)."""
    if value.startswith("builtin:"):
        return resolve_builtin(value.removeprefix("builtin:"), kind)
    if not value.strip():
        raise FileNotFoundError("empty path")
    if "\x00" in value:
        raise FileNotFoundError(f"{value[:60]!r}: a path cannot hold a NUL character")
    try:
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        found, is_file = path.exists(), path.is_file()
    except RuntimeError as e:  # ~ without a home directory
        raise FileNotFoundError(f"{value[:200]}: {e}") from None
    except OSError as e:  # a name too long for the filesystem, a loop of links
        raise FileNotFoundError(f"{value[:200]}: {e.strerror or e}") from None
    if not found:
        raise FileNotFoundError(f"file not found: {path}")
    if not is_file and kind != "pipelines":
        raise FileNotFoundError(f"{path}: not a file (a directory, FIFO or device)")
    return path


def resolve_judge(ref: str, base_dir: Path, overrides: Iterable[str] = ()) -> Path:
    """A judge reference as written in a pipeline or on the command line -> its spec file.
    ``builtin:pairwise``/``builtin:pointwise`` pick the variant for the ``model=`` override."""
    return resolve_path(default_judge_ref(ref, overrides), base_dir, "judges")
