"""YAML loading that remembers where every value came from.

Errors are reported as ``FILE:LINE: field.path: what was expected, what was found`` so that a user
never sees a traceback for a typo. PyYAML's composer gives us node marks; we walk the node tree
once to build a map from key paths to line numbers and then construct plain Python data.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from grm.base import GrmError

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
        return f"{self.path}:{self.line_of(key)}"


MAX_NODES = 50_000
"""Values a config may hold once its aliases are expanded. Shipped configs hold a few hundred;
aliases of aliases can expand into billions ("billion laughs") and would hang the loader."""


def _line_map(root: yaml.Node, path: Path, loader: yaml.SafeLoader) -> dict[Key, int]:
    """The line (1-based) of every key path; iterative, and bounded by ``MAX_NODES``."""
    lines: dict[Key, int] = {}
    stack: list[tuple[yaml.Node, Key]] = [(root, ())]
    while stack:
        node, key = stack.pop()
        lines.setdefault(key, node.start_mark.line + 1)
        if len(lines) > MAX_NODES:
            raise ConfigError(f"{path}:{node.start_mark.line + 1}: more than {MAX_NODES} values (aliases of aliases?)")
        if isinstance(node, yaml.MappingNode):
            for k_node, v_node in node.value:
                k = _key_of(k_node, loader)
                lines[key + (k,)] = k_node.start_mark.line + 1
                stack.append((v_node, key + (k,)))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[key + (i,)] = item.start_mark.line + 1
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as e:  # `!!int x`, `!!bool maybe`, `2001-13-45`: PyYAML's constructors raise these unmarked
            what = f"{node.value!r} " if isinstance(node, yaml.ScalarNode) else ""
            kind = node.tag.rsplit(":", 1)[-1]
            raise yaml.constructor.ConstructorError(None, None, f"cannot read {what}as {kind} ({e})", node.start_mark) from None


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
        seen[k] = k_node.start_mark.line + 1
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


def parse_yaml_text(text: str, path: Path) -> Located:
    """Parse YAML text; every syntax problem becomes a one-line ConfigError."""
    if "\t" in text:
        for i, line in enumerate(text.splitlines(), 1):
            indent = line[: len(line) - len(line.lstrip())]
            if "\t" in indent:
                raise ConfigError(f"{path}:{i}: tab character in indentation; YAML needs spaces")
    try:
        loader = _UniqueKeyLoader(text)  # checks every character first
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise ConfigError(f"{path}:{line}: invalid YAML: control character U+{e.character:04X} is not allowed") from None
    try:  # one parse: the node tree gives the lines, then the data is constructed from it
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(f"{path}:1: file is empty; expected a YAML mapping (key: value lines)")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        what = e.problem or "invalid YAML"
        ctx = f" ({e.context})" if e.context and e.context != what else ""
        raise ConfigError(f"{path}:{line}: invalid YAML: {what}{ctx}") from None
    except yaml.YAMLError as e:  # pragma: no cover - unmarked errors are rare
        raise ConfigError(f"{path}:1: invalid YAML: {e}") from None
    except RecursionError:  # PyYAML composes and constructs nested collections recursively
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()
    return Located(data=data, path=path, lines=_line_map(node, path, loader))


def load_yaml(path: str | os.PathLike[str]) -> Located:
    """Load a YAML mapping from ``path`` with line information, or raise ConfigError."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a YAML file") from None
    text = _decode(raw, path)
    if not text.strip():
        raise ConfigError(f"{path}:1: file is empty; expected a YAML mapping (key: value lines)")
    loc = parse_yaml_text(text, path)
    if not isinstance(loc.data, dict):
        kind = type(loc.data).__name__ if loc.data is not None else "nothing"
        raise ConfigError(f"{path}:1: top level must be a mapping (key: value lines), found {kind}")
    return loc


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Valid field names of the (nested) model addressed by ``loc``, for 'did you mean'."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        if isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            ann = current.model_fields[part].annotation
            current = _first_model(ann)
        else:
            # Tagged unions put the variant name into loc; try to find it.
            current = _variant(current, part)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _first_model(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _is_container(ann: Any) -> bool:
    """list[...] or dict[...] (possibly inside Optional): the next override key is an index."""
    import typing

    origin = typing.get_origin(ann)
    if origin in (list, dict, tuple):
        return True
    return any(_is_container(a) for a in typing.get_args(ann) if a is not type(None)) if origin is not None else False


def _variant(current: Any, name: Any) -> Any:
    if current is None:
        return None
    for arg in getattr(current, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel) and arg.__name__ == name:
            return arg
    return current


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(err: ValidationError, located: Located, model: type[BaseModel]) -> str:
    """One line per problem: FILE:LINE: field.path: expected ..., found ..."""
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        # pydantic adds tagged-union variant names to loc; drop those that are not data keys.
        data_loc = _data_loc(located.data, loc)
        dotted = ".".join(str(p) for p in data_loc)
        where = located.where(data_loc)
        kind = e["type"]
        if kind == "extra_forbidden":
            bad = data_loc[-1] if data_loc else "?"
            parent = data_loc[:-1]
            choices = _fields_at(model, loc[:-1])
            near = difflib.get_close_matches(str(bad), choices, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else (f"; valid keys: {', '.join(choices)}" if choices else "")
            prefix = ".".join(str(p) for p in parent)
            out.append(f"{where}: {prefix + ': ' if prefix else ''}unknown key '{bad}'{hint}")
        elif kind == "missing":
            out.append(f"{where}: {dotted}: required field is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            found = f", found {_describe(e['input'])}" if "input" in e and kind != "value_error" else ""
            out.append(f"{where}: {dotted + ': ' if dotted else ''}{msg}{found}")
    return "\n".join(out)


def _data_loc(data: Any, loc: tuple) -> tuple:
    """Keep only the parts of a pydantic error location that index into the actual data."""
    out: list[Any] = []
    cur = data
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, dict) and not isinstance(part, int) and part not in cur and loc[-1] == part:
            out.append(part)  # the missing/unknown key itself
        # else: a union tag or a validator name; skip it
    return tuple(out)


def validate(model: type[BaseModel], located: Located, context: dict[str, Any] | None = None) -> Any:
    """Validate located data against ``model``; raise ConfigError with file:line messages."""
    ctx = {"base_dir": located.path.parent, "located": located}
    ctx.update(context or {})
    try:
        return model.model_validate(located.data, context=ctx)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, located, model)) from None


# ----------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], parsed value). The value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}': expected key.path=value")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override '{text}': empty key; expected key.path=value")
    try:
        value = yaml.load(raw, Loader=_UniqueKeyLoader) if raw.strip() else ""  # a SafeLoader
    except (yaml.YAMLError, RecursionError):
        value = raw
    return key.split("."), value


def _index(part: str) -> int | None:
    """``part`` as a list index (``0``, ``-1``), else None. ASCII digits only: ``str.isdigit``
    also holds for '²', which ``int`` refuses."""
    return int(part) if re.fullmatch(r"-?[0-9]+", part) else None


def apply_overrides(located: Located, overrides: Iterable[str], model: type[BaseModel]) -> Located:
    """Apply ``key.path=value`` overrides in place; unknown keys are refused with a suggestion.

    Type checking happens when the result is validated; errors then name the override.
    """
    for text in overrides:
        parts, value = parse_override(text)
        cur = located.data
        fields_model: Any = model
        free_key = False  # the next key indexes a list or a dict field: any key is allowed
        path: list[Any] = []  # the keys as the data holds them (list indexes as ints, counted from 0)
        for i, part in enumerate(parts):
            key: Any = _index(part) if isinstance(cur, list) and _index(part) is not None else part
            last = i == len(parts) - 1
            is_model = isinstance(fields_model, type) and issubclass(fields_model, BaseModel)
            if is_model and not free_key:
                choices = list(fields_model.model_fields)
                if key not in choices:
                    near = difflib.get_close_matches(str(key), choices, n=1)
                    hint = f"; did you mean '{'.'.join(parts[:i] + [near[0]])}'?" if near else ""
                    raise ConfigError(f"override '{text}': unknown key '{'.'.join(parts[: i + 1])}'{hint}")
                ann = fields_model.model_fields[key].annotation
                free_key = _is_container(ann)
                fields_model = _first_model(ann)
            else:
                free_key = False
            if isinstance(cur, list):
                if not isinstance(key, int) or not -len(cur) <= key < len(cur):
                    raise ConfigError(f"override '{text}': '{'.'.join(parts[:i])}' has no item {part}")
                path.append(key % len(cur))
                if last:
                    cur[key] = value
                else:
                    cur = cur[key]
                continue
            if not isinstance(cur, dict):
                raise ConfigError(f"override '{text}': '{'.'.join(parts[:i])}' is not a mapping")
            path.append(key)
            if last:
                cur[key] = value
            else:
                if not isinstance(cur.get(key), (dict, list)):
                    cur[key] = {}  # the file's value here is gone: errors about it are the override's
                    located.overrides[tuple(path)] = text
                cur = cur[key]
        located.overrides[tuple(path)] = text
    return located
