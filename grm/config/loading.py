"""Validation of YAML configs and ``key.path=value`` overrides, with errors that say where.

Errors are reported as ``FILE:LINE: field.path: what was expected, what was found`` so that a user
never sees a traceback for a typo; ``grm.config.yaml_reader`` reads the file and knows the lines.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from grm.config.yaml_reader import ConfigError, Located, load_yaml, parse_yaml_text, yaml_value

__all__ = ["ConfigError", "Located", "apply_overrides", "load_yaml", "parse_override", "parse_yaml_text", "validate"]


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
    # not YAML: the text itself, which validation then names with the override
    return key.split("."), yaml_value(raw, f"override '{text}'")


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
