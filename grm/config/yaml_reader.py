"""Reading YAML text into plain data that remembers the line of every key path.

PyYAML's composer gives us node marks; we walk the node tree once to build a map from key paths to
line numbers and then construct plain Python data. ``grm.config.loading`` validates it and turns
every error into ``FILE:LINE: field.path: ...``.

The work a file can cause is bounded before anything is built from it: its size (``MAX_BYTES``),
the nodes written (``MAX_NODES``, counted as they are composed), how deep they nest
(``MAX_DEPTH``), and what aliases expand to (the same bounds, counted on the node graph, where an
alias is a shared node, so the count is linear in what was written). Every limit is a one-line
``FILE:LINE:`` error, reached in well under a second.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grm.base import GrmError, regular_file_bytes
from grm.jsonl import parse_failure

Key = tuple[Any, ...]


class ConfigError(GrmError):
    """A user error in a config file or override: printed as one line, never as a traceback."""


@dataclass
class Located:
    """Plain data loaded from a YAML file plus the line (1-based) of every key path."""

    data: Any
    path: Path
    lines: dict[Key, int] = field(default_factory=dict)
    overrides: dict[Key, str] = field(default_factory=dict)
    """Key paths set on the command line, with the override text, so errors can name it."""

    def line_of(self, key: Iterable[Any]) -> int:
        """Line of the deepest known prefix of ``key`` (so a missing field points at its parent)."""
        key = tuple(key)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), 1)

    def where(self, key: Iterable[Any] = ()) -> str:
        key = tuple(key)
        for k, text in self.overrides.items():
            if key[: len(k)] == k:
                return f"{self.path}: override '{text}'"
        # a check of a block they changed (not the whole file's: every override is inside that)
        inside = [text for k, text in self.overrides.items() if key and k[: len(key)] == key]
        if inside:
            return f"{self.path}:{self.line_of(key)} (with override {', '.join(repr(t) for t in inside)})"
        return f"{self.path}:{self.line_of(key)}"


MAX_BYTES = 1 << 18
"""Size of a config file at most (256 KiB; the largest shipped one is 4 KB). PyYAML scanned about
1 MB/s on the 2-core reference machine under load: a file at the limit loads in about 0.3 s."""
MAX_NODES = 10_000
"""Values a config may hold, as written and once its aliases are expanded (shipped ones: a few
hundred). Aliases of aliases can expand into billions ("billion laughs"); composing the values
as written took 100-140 us each on the reference machine (50,000: 5 s), 10,000 about 1.3 s."""
MAX_DEPTH = 64
"""Levels a config may nest, as written and once its aliases are expanded (shipped ones: 6). Bounds
the line map (each value's key path is as long as its depth) and keeps PyYAML's recursive composer
far from Python's recursion limit."""


class _TooBig(yaml.MarkedYAMLError):
    """A limit above was passed: valid YAML, but more than a config may hold."""


class _LimitError(ConfigError):
    """``_TooBig`` as the user sees it: refused for an override too, where bad YAML is plain text."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_expansion(root: yaml.Node, loader: _UniqueKeyLoader) -> None:
    """Refuse a node graph whose tree (aliases expanded) is recursive, larger than ``MAX_NODES`` or
    deeper than ``MAX_DEPTH``. Sizes and depths are summed once per node (an alias is a shared
    node), iteratively: linear in the written nodes, whatever the aliases expand to."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()  # nodes on the current path: an alias to one of them is recursive
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        kids = _children(node)
        if done:
            open_.discard(id(node))
            size[id(node)] = 1 + sum(size[id(k)] for k in kids)
            depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[id(node)] > MAX_NODES:
                raise _TooBig(
                    problem=f"more than {MAX_NODES} values once its aliases are expanded (aliases of aliases?)",
                    problem_mark=node.start_mark,
                )
            if depth[id(node)] > MAX_DEPTH:
                raise _TooBig(
                    problem=f"nested more than {MAX_DEPTH} levels deep once its aliases are expanded",
                    problem_mark=node.start_mark,
                )
            continue
        if id(node) in size:
            continue
        open_.add(id(node))
        stack.append((node, True))
        for k in kids:
            if id(k) in open_:
                raise _TooBig(
                    problem=f"recursive alias: the value of line {loader.file_line(k.start_mark)} contains itself",
                    problem_mark=node.start_mark,
                )
            if id(k) not in size:
                stack.append((k, False))


def _line_map(root: yaml.Node, loader: _UniqueKeyLoader) -> dict[Key, int]:
    """The line (1-based) of every key path; iterative. ``_check_expansion`` bounds it: at most
    ``MAX_NODES`` key paths of at most ``MAX_DEPTH`` keys."""
    lines: dict[Key, int] = {}
    stack: list[tuple[yaml.Node, Key]] = [(root, ())]
    while stack:
        node, key = stack.pop()
        lines.setdefault(key, loader.file_line(node.start_mark))
        if isinstance(node, yaml.MappingNode):
            for k_node, v_node in node.value:
                k = _key_of(k_node, loader)
                lines[key + (k,)] = loader.file_line(k_node.start_mark)
                stack.append((v_node, key + (k,)))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[key + (i,)] = loader.file_line(item.start_mark)
                stack.append((item, key + (i,)))
    return lines


def _key_of(k_node: yaml.Node, loader: yaml.SafeLoader) -> Any:
    """A mapping key as the constructed data holds it (``0x1F: 1`` holds the int 31), so an error
    about the key finds its line."""
    if not isinstance(k_node, yaml.ScalarNode):
        return None  # a list or mapping as a key: construction refused it already
    try:
        return loader.construct_object(k_node)
    except yaml.YAMLError:  # pragma: no cover - the same node was constructed once already
        return k_node.value


_BREAK = re.compile(r"\r\n|\r|\n")
"""A line end as editors count them (not YAML 1.1's U+0085, U+2028 and U+2029)."""

_REFUSED_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("binary", "set", "omap", "pairs"))
_NUMBER_TAGS = frozenset(("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one) and stops
    composing past ``MAX_NODES`` written values or ``MAX_DEPTH`` levels."""

    _nodes = 0
    _depth = 0
    _breaks: list[int] | None = None
    _exotic = False

    def file_line(self, mark: yaml.Mark | None) -> int:
        """The 1-based line of ``mark`` as an editor counts it. PyYAML (YAML 1.1) also breaks
        lines at U+0085, U+2028 and U+2029, so after one of them in a string or comment its own
        line numbers run ahead of the file's; then the line is counted from the mark's offset."""
        if mark is None:
            return 1
        if self._breaks is None:
            text = self.buffer
            exotic = "\x85" in text or "\u2028" in text or "\u2029" in text
            self._breaks = [m.end() for m in _BREAK.finditer(text)] if exotic else []
            self._exotic = exotic
        if not self._exotic:
            return mark.line + 1
        return bisect.bisect_right(self._breaks, mark.index) + 1  # breaks that end at or before the mark

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _TooBig(problem=f"more than {MAX_NODES} values", problem_mark=self.peek_event().start_mark)
        if self._depth >= MAX_DEPTH:
            raise _TooBig(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if node.tag in _REFUSED_TAGS:
            raise yaml.constructor.ConstructorError(
                None, None, f"YAML tag !!{node.tag.rsplit(':', 1)[-1]} is not used in grm files (plain values)", node.start_mark
            )
        if isinstance(node, yaml.ScalarNode) and node.style is None and ":" in node.value and node.tag in _NUMBER_TAGS:
            return node.value  # YAML 1.1's base 60 (`1:30` is 90): read as the text written, as YAML 1.2 does
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as e:  # `!!int x`, `!!bool maybe`, `2001-13-45`: PyYAML's constructors raise these unmarked
            shown = node.value if len(node.value) <= 60 else f"{node.value[:40]}... ({len(node.value)} characters)"
            what = f"{shown!r} " if isinstance(node, yaml.ScalarNode) else ""
            kind = node.tag.rsplit(":", 1)[-1]
            why = parse_failure(e).removeprefix("ValueError: ")
            raise yaml.constructor.ConstructorError(None, None, f"cannot read {what}as {kind} ({why})", node.start_mark) from None


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for k_node, _ in node.value:
        if k_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *defaults`: construct_mapping merges it; explicit keys may override it
        k = loader.construct_object(k_node, deep=deep)
        try:
            hash(k)
        except TypeError:
            continue  # a list or mapping as a key: construct_mapping refuses it with its line
        if k in seen:
            raise yaml.MarkedYAMLError(
                problem=f"duplicate key {k!r} (first defined on line {seen[k]})", problem_mark=k_node.start_mark
            )
        seen[k] = loader.file_line(k_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: file is not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); save it as UTF-8"
        ) from None


def parse_yaml_text(text: str, path: Path | str) -> Located:
    """Parse YAML text; every syntax problem and passed limit becomes a one-line ConfigError."""
    path = Path(path)
    node, data, loader = _compose(text, str(path))
    if node is None:
        raise ConfigError(f"{path}:1: file is empty; expected a YAML mapping (key: value lines)")
    return Located(data=data, path=path, lines=_line_map(node, loader))


def _compose(text: str, where: str) -> tuple[yaml.Node | None, Any, _UniqueKeyLoader]:
    """(node tree, constructed data, loader) of YAML ``text`` (no node for an empty document), or a
    ConfigError naming ``where``."""
    if len(text) > MAX_BYTES:
        raise _LimitError(f"{where}:1: {len(text)} characters; a config holds at most {MAX_BYTES}")
    if "\t" in text:
        for i, line in enumerate(_BREAK.split(text), 1):
            indent = line[: len(line) - len(line.lstrip())]
            if "\t" in indent:
                raise ConfigError(f"{where}:{i}: tab character in indentation; YAML needs spaces")
    try:
        loader = _UniqueKeyLoader(text)  # checks every character first
    except yaml.reader.ReaderError as e:
        line = len(_BREAK.findall(text, 0, e.position)) + 1
        raise ConfigError(f"{where}:{line}: invalid YAML: control character U+{e.character:04X} is not allowed") from None
    try:  # one parse: the node tree gives the lines, then the data is constructed from it
        node = loader.get_single_node()
        if node is None:
            return None, None, loader
        _check_expansion(node, loader)
        data = loader.construct_document(node)
    except _TooBig as e:
        raise _LimitError(f"{where}:{loader.file_line(e.problem_mark)}: {e.problem}") from None
    except yaml.MarkedYAMLError as e:
        line = loader.file_line(e.problem_mark or e.context_mark)
        what = e.problem or "invalid YAML"
        ctx = f" ({e.context})" if e.context and e.context != what else ""
        raise ConfigError(f"{where}:{line}: invalid YAML: {what}{ctx}") from None
    except yaml.YAMLError as e:  # pragma: no cover - unmarked errors are rare
        raise ConfigError(f"{where}:1: invalid YAML: {e}") from None
    finally:
        loader.dispose()
    return node, data, loader


def load_yaml(path: str | os.PathLike[str], *, own: bool = False) -> Located:
    """Load a YAML mapping from ``path`` with line information, or raise ConfigError; ``own``: a
    file grm wrote into its own directory, never read through a link (``regular_file_bytes``)."""
    path = Path(path)
    try:  # a FIFO would block the read, /dev/zero never end it: refused on the open descriptor
        raw = regular_file_bytes(path, ConfigError, limit=MAX_BYTES, own=own)
    except ConfigError as e:
        if "more than the" in str(e):
            raise ConfigError(f"{path}:1: file is over {MAX_BYTES} bytes; a config holds at most that") from None
        raise
    if raw is None:
        raise ConfigError(f"{path}: no such file")
    text = _decode(raw, path)
    if not text.strip():
        raise ConfigError(f"{path}:1: file is empty; expected a YAML mapping (key: value lines)")
    loc = parse_yaml_text(text, path)
    if not isinstance(loc.data, dict):
        kind = type(loc.data).__name__ if loc.data is not None else "nothing"
        raise ConfigError(f"{path}:1: top level must be a mapping (key: value lines), found {kind}")
    return loc


def yaml_value(text: str, where: str) -> Any:
    """A command-line value read as YAML within a file's limits (an alias bomb fits on one line), or
    ``text`` itself when it is not YAML; a passed limit is a ConfigError naming ``where``."""
    if not text.strip():
        return ""
    try:
        return _compose(text, where)[1]
    except _LimitError:
        raise
    except ConfigError:
        return text
