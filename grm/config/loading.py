"""Validation of YAML configs and ``key.path=value`` overrides, with errors that say where.

Errors are reported as ``FILE:LINE: field.path: what was expected, what was found`` so that a user
never sees a traceback for a typo; ``grm.config.yaml_reader`` reads the file and knows the lines.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Discriminator, ValidationError

from grm.config.yaml_reader import ConfigError, Located, load_yaml, parse_yaml_text, yaml_value
from grm.jsonl import surrogate_at

__all__ = ["ConfigError", "Located", "apply_overrides", "load_yaml", "parse_override", "parse_yaml_text", "validate"]


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Valid field names of the (nested) model addressed by ``loc``, for 'did you mean'."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        if _is_model(current) and part in current.model_fields:
            current = current.model_fields[part].annotation
        elif isinstance(part, str) and part in _by_tag(current):
            current = _by_tag(current)[part]  # pydantic puts a tagged union's chosen tag into loc
        # else: a mapping's key or a validator's name; the model stays
        if not _is_model(current):
            models = _models(current)
            current = models[0] if len(models) == 1 else current
    return list(current.model_fields) if _is_model(current) else []


def _is_model(x: Any) -> bool:
    return isinstance(x, type) and issubclass(x, BaseModel)


def _models(ann: Any) -> list[type[BaseModel]]:
    """The models annotation ``ann`` holds, at any depth (a union's members, a list's items)."""
    if _is_model(ann):
        return [ann]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(ann):
        out += [m for m in _models(arg) if m not in out]
    return out


def _by_tag(ann: Any) -> dict[str, type[BaseModel]]:
    """The models of a union chosen by their ``type`` key, by the tag (``type`` value) of each."""
    out: dict[str, type[BaseModel]] = {}
    for m in _models(ann):
        field = m.model_fields.get("type")
        for tag in typing.get_args(field.annotation) if field is not None else ():
            if isinstance(tag, str):
                out.setdefault(tag, m)
    return out


def _default_tag(field: Any) -> str | None:
    """The tag a union field's discriminator gives a mapping without ``type`` (``by_type``'s
    default); pydantic keeps the discriminator in the field's metadata."""
    for meta in field.metadata:
        if isinstance(meta, Discriminator) and callable(meta.discriminator):
            tag = meta.discriminator({})
            return tag if isinstance(tag, str) else None
    return None


def _model_for(owner: type[BaseModel], key: str, value: Any, pending: str | None) -> Any:
    """The model of field ``key`` of ``owner`` that holds ``value`` (the data there now), for
    looking up the next override key. In a union chosen by ``type``: the member that ``pending``
    (the ``type`` the same overrides set there) or else the value's own ``type`` selects, or the
    field's default's; None when that type names no member (validation then says so)."""
    field = owner.model_fields[key]
    models = _models(field.annotation)
    if len(models) <= 1:
        return models[0] if models else None
    tag = pending
    if tag is None and isinstance(value, dict) and isinstance(value.get("type"), str):
        tag = value["type"]
    if tag is None and value is None:  # not in the data: the field's default holds it
        tag = getattr(field.default, "type", None)
    if tag is None:
        tag = _default_tag(field)
    return _by_tag(field.annotation).get(tag) if isinstance(tag, str) else None


def _is_container(ann: Any) -> bool:
    """list[...] or dict[...] (possibly inside Optional): the next override key is an index."""
    origin = typing.get_origin(ann)
    if origin in (list, dict, tuple):
        return True
    return any(_is_container(a) for a in typing.get_args(ann) if a is not type(None)) if origin is not None else False


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(err: ValidationError, located: Located, model: type[BaseModel]) -> str:
    """One line per problem: FILE:LINE: field.path: expected ..., found ..."""
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        # pydantic adds tagged-union variant names to loc; drop those that are not data keys.
        data_loc = _data_loc(located.data, loc, missing=e["type"] == "missing")
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


def _data_loc(data: Any, loc: tuple, missing: bool = False) -> tuple:
    """Keep only the parts of a pydantic error location that index into the actual data (and, for
    a ``missing`` field, the field). A check of a whole model in a union chosen by ``type`` ends
    its location with the chosen tag (``('parser', 'logprob')``), which is no key."""
    out: list[Any] = []
    cur = data
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif missing and isinstance(cur, dict) and not isinstance(part, int) and part not in cur and loc[-1] == part:
            out.append(part)  # the missing key itself
        # else: a union tag or a validator name; skip it
    return tuple(out)


def validate(model: type[BaseModel], located: Located, context: dict[str, Any] | None = None) -> Any:
    """Validate located data against ``model``; raise ConfigError with file:line messages."""
    ctx = {"base_dir": located.path.parent, "located": located}
    ctx.update(context or {})
    found = surrogate_at(located.data, pairs_ok=False)  # keys too, before a model reads them as field names
    if found is not None:
        raise ConfigError(f"{located.where(found[0])}: {found[1]}")
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

    Type checking happens when the result is validated; errors then name the override. A key
    inside a union chosen by ``type`` (``parser``, ``engine``, ``algorithm``) is looked up in the
    member that the ``type`` there selects: the one these overrides set (``parser.type=logprob
    parser.prefix=x``, in either order), else the data's, else the default.
    """
    overrides = list(overrides)
    types: dict[tuple[str, ...], str] = {}  # key path -> the type the overrides give it (the last wins)
    for text in overrides:
        parts, value = parse_override(text)
        if parts[-1] == "type" and isinstance(value, str):
            types[tuple(parts[:-1])] = value
        elif isinstance(value, dict) and isinstance(value.get("type"), str):  # parser={type: logprob, ...}
            types[tuple(parts)] = value["type"]
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
                here = cur.get(key) if isinstance(cur, dict) else None
                fields_model = _model_for(fields_model, key, here, types.get(tuple(parts[: i + 1])))
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
