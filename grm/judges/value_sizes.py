"""How many characters a value stands for, and how many an operation of a judge template would
build, read from its operands before it runs (``grm.judges.sandbox`` refuses what passes its cap).

Only operations that multiply need an estimate: ``'x' * n``, ``s.center(n)``, ``'%0999999999d' % 1``,
``'{0}{0}{0}'.format(big)``, ``|join(big_separator)``, ``|tojson(indent=n)``. Anything else builds at
most a small multiple of its inputs and is checked on its result.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Iterator
from typing import Any


def _leaf_size(v: Any) -> int | None:
    """The printed size of a value with no items to visit; None for a container."""
    if isinstance(v, (str, bytes)):
        return len(v)
    if isinstance(v, bool) or v is None:
        return 1
    if isinstance(v, int):
        return v.bit_length() // 3 + 1
    if isinstance(v, range):
        return len(str(v))  # lazy: what expands it (|list, |join, a loop) is checked or counted
    if isinstance(v, (dict, list, tuple, set, frozenset)):
        return None
    return 1


def _items(v: Any) -> Iterator[Any]:
    if isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield x
    else:
        yield from v


def size_of(x: Any, cap: int) -> int:
    """The characters ``x`` stands for when printed or joined (a string's length; a container's items
    recursively), counted up to just past ``cap``. A list holding one string a million times is a
    million strings long however little memory it takes, and ``[l, l]`` built 60 times over is 2^60
    items: each container is visited once (its size remembered), so counting stays linear in memory."""
    leaf = _leaf_size(x)
    if leaf is not None:
        return leaf
    memo: dict[int, int] = {}
    # frames: [container, its items, size so far]; a container met again while open is a cycle
    stack: list[list[Any]] = [[x, _items(x), 2 + 2 * len(x)]]
    open_ids = {id(x)}
    while stack:
        frame = stack[-1]
        for child in frame[1]:
            size = _leaf_size(child)
            if size is None:
                size = memo.get(id(child))
            if size is None and id(child) in open_ids:
                size = 1  # printed as [...]
            if size is None:
                stack.append([child, _items(child), 2 + 2 * len(child)])
                open_ids.add(id(child))
                break
            frame[2] += size
            if frame[2] > cap:
                return cap + 1
        else:
            stack.pop()
            open_ids.discard(id(frame[0]))
            memo[id(frame[0])] = frame[2]
            if not stack:
                return min(frame[2], cap + 1)
            stack[-1][2] += frame[2]
            if stack[-1][2] > cap:
                return cap + 1
    return cap + 1  # pragma: no cover - the loop returns


def _largest(values: Iterable[Any], cap: int) -> int:
    return max((size_of(v, cap) for v in values), default=0)


def _int(x: Any, default: int = 0) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) else default


# Every part bounded, so scanning a format of any length is linear: a key past 64 characters is
# read as a directive of its own (an over-estimate), a width past 32 digits as 32 (still too large).
_PRINTF = re.compile(r"%(?:\(([^)]{0,64})\))?[-#0 +]{0,16}(\*|\d{1,32})?(?:\.(\*|\d{1,32}))?[hlL]?(.)", re.S)
_SPEC_NUMBERS = re.compile(r"\d+")


def _width(digits: str | None, cap: int) -> int:
    """A width or precision written in a format (``%0999999999d``), read without building a huge int."""
    if not digits or digits == "*":
        return 0
    return cap + 1 if len(digits) > len(str(cap)) else int(digits)


def printf_size(fmt: str, args: Any, cap: int) -> int:
    """Characters ``fmt % args`` may produce: each directive gives its width, precision or the size
    of the argument it prints (the largest one, when it cannot tell which)."""
    values = list(args.values()) if isinstance(args, dict) else list(args) if isinstance(args, tuple) else [args]
    arg = _largest(values, cap)
    stars = max((_int(v) for v in values), default=0)
    total = len(fmt)
    for m in _PRINTF.finditer(fmt):
        key, width, precision, conversion = m.groups()
        if conversion == "%":
            total += 1
            continue
        shown = size_of(args[key], cap) if key is not None and isinstance(args, dict) and key in args else arg
        total += max(shown, _width(width, cap), _width(precision, cap), stars if "*" in (width, precision) else 0)
        if total > cap:
            break
    return total


def format_size(fmt: str, args: tuple[Any, ...], kwargs: dict[str, Any], cap: int) -> int:
    """Characters ``fmt.format(*args, **kwargs)`` may produce (fields x the largest argument or width)."""
    values = [*args, *kwargs.values()]
    arg = _largest(values, cap)
    ints = max((_int(v) for v in values), default=0)
    total = len(fmt)
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return total  # str.format raises the same error, with its own message
    for _, name, spec, _ in fields:
        if name is None:
            continue
        widths = [_width(d, cap) for d in _SPEC_NUMBERS.findall(spec or "")]
        total += max([arg, ints if "{" in (spec or "") else 0, *widths])
        if total > cap:
            break
    return total


def _replace_size(s: str, old: Any, new: Any, count: Any) -> int:
    old, new = str(old), str(new)
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(0, len(new) - len(old))


def _join_size(items: Any, sep: Any, cap: int) -> int:
    if not isinstance(items, (list, tuple, str, dict, set, frozenset, range)):
        return 0  # a generator: its result is checked once joined
    n = len(items)
    return size_of(list(items) if isinstance(items, (dict, set, frozenset, range)) else items, cap) + max(0, n - 1) * len(
        str(sep)
    )


def _json_size(value: Any, indent: Any, cap: int) -> int:
    """``|tojson(indent)`` repeats the indent once per item per level of nesting."""
    base = size_of(value, cap)
    step = len(indent) if isinstance(indent, str) else _int(indent)
    if not step:
        return base
    items, depth, stack = 0, 0, [(value, 1)]
    while stack and items * step * depth <= cap:
        v, d = stack.pop()
        depth = max(depth, d)
        children = list(v.values()) if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else []
        items += len(children)
        stack.extend((c, d + 1) for c in children)
    return base + items * step * depth


def filter_size(name: str, value: Any, args: tuple[Any, ...], kw: dict[str, Any], cap: int) -> int:
    """Characters a multiplying filter may produce, from its arguments (0: none of those)."""

    def arg(i: int, key: str, default: Any = None) -> Any:
        return args[i] if len(args) > i else kw.get(key, default)

    if name == "center":
        return max(len(str(value)), _int(arg(0, "width", 80)))
    if name == "indent":
        width = arg(0, "width", 4)
        pad = len(width) if isinstance(width, str) else _int(width)
        return len(str(value)) + (str(value).count("\n") + 1) * pad
    if name == "wordwrap":
        s, width = str(value), max(1, _int(arg(0, "width", 79), 1))
        return len(s) + (len(s) // width + 1) * len(str(arg(2, "wrapstring") or "\n"))
    if name == "join":
        return _join_size(value, arg(0, "d", ""), cap)
    if name == "replace":
        return _replace_size(str(value), arg(0, "old", ""), arg(1, "new", ""), arg(2, "count"))
    if name == "format":
        return printf_size(str(value), kw or args, cap)
    if name in ("batch", "slice"):
        return _int(arg(0, "linecount" if name == "batch" else "slices"))
    if name == "tojson":
        return _json_size(value, arg(0, "indent"), cap)
    if name == "urlize":
        s = str(value)
        extra = sum(len(str(x)) for x in (arg(2, "target") or "", arg(3, "rel") or "", arg(4, "extra_schemes") or ""))
        return 3 * len(s) + (len(s) // 4 + 1) * (extra + 40)
    if name == "sum" and not isinstance(arg(1, "start", 0), (int, float)):
        return cap + 1  # sum(start=[]) concatenates in quadratic time; |join or a loop say it linearly
    return 0


def _as_text(x: Any) -> Any:
    """bytes (``prompt.encode()``) as text of one character per byte: sized like the str it mirrors."""
    return x.decode("latin-1") if isinstance(x, (bytes, bytearray)) else x


def method_size(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any], cap: int) -> int:
    """Characters a multiplying ``str`` (or ``bytes``) method may produce (``s.center(10**9)``,
    ``'{:>999999}'.format``)."""
    wrapped = getattr(method, "__wrapped__", method)  # the sandbox's own wrapper of str.format
    owner = _as_text(getattr(wrapped, "__self__", None))
    if not isinstance(owner, str):
        return 0
    args = tuple(_as_text(a) for a in args)
    name = getattr(wrapped, "__name__", "")
    first = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill"):
        return max(len(owner), _int(first))
    if name == "expandtabs":
        return len(owner) + owner.count("\t") * _int(first if args else kwargs.get("tabsize"), 8)
    if name == "replace":
        return _replace_size(owner, first, args[1] if len(args) > 1 else "", args[2] if len(args) > 2 else kwargs.get("count"))
    if name == "join":
        return _join_size(first, owner, cap)
    if name == "format":
        return format_size(owner, args, kwargs, cap)
    if name == "format_map":
        return format_size(owner, (), dict(first) if isinstance(first, dict) else {}, cap)
    if name == "translate" and isinstance(first, dict):
        return len(owner) * max([1, *(len(v) for v in first.values() if isinstance(v, str))])
    return 0


def binop_size(op: str, a: Any, b: Any, cap: int) -> int:
    a, b = _as_text(a), _as_text(b)
    if op == "*":
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                return size_of(seq, cap) * max(0, n)
    if op == "+" and isinstance(a, (str, list, tuple)) and isinstance(b, (str, list, tuple)):
        return size_of(a, cap) + size_of(b, cap)
    if op == "%" and isinstance(a, str):
        return printf_size(a, b, cap)
    return 0


def int_bits(op: str, a: Any, b: Any) -> int:
    if not (isinstance(a, int) and isinstance(b, int)):
        return 0
    if op == "*":
        return a.bit_length() + b.bit_length()
    if op == "**" and b > 0 and abs(a) > 1:
        return a.bit_length() * b
    return 0
