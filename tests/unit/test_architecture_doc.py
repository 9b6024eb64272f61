"""docs/architecture.md describes the import contract pyproject.toml enforces: a contract added,
renamed or re-layered without the document following fails here, not in a reader's head."""

import re
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: import-linter installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def test_the_document_quotes_every_import_contract_by_its_name():
    missing = [c["name"] for c in CONTRACTS if f'"{c["name"]}"' not in DOC]
    assert len(CONTRACTS) >= 10 and not missing, missing


def test_the_document_shows_the_layers_in_the_contracts_order():
    (layers,) = [c["layers"] for c in CONTRACTS if c["type"] == "layers"]
    assert "```\n" + "\n".join(layers) + "\n```" in DOC


def test_every_layered_room_has_a_row_in_the_rooms_table():
    (layers,) = [c["layers"] for c in CONTRACTS if c["type"] == "layers"]
    rooms = {r.strip() for layer in layers for r in re.split(r"[|:]", layer)}
    rows = set(re.findall(r"^\| (.+?) \|", DOC, re.MULTILINE))
    named = {n for row in rows for n in re.findall(r"`([\w_]+)`", row)}
    assert rooms <= named, rooms - named


def test_the_document_names_only_modules_that_exist():
    """Every ``grm/...py`` path it cites is a file of the checkout (planned ``grm/envs/`` aside)."""
    cited = set(re.findall(r"`(grm/[\w/]+\.py)`", DOC))
    assert cited and not [p for p in cited if not (ROOT / p).is_file()]
