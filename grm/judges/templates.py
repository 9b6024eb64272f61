"""Judge prompt templates: Jinja2, sandboxed, strict about undefined variables.

Templates receive structured data (``prompt``, ``response``, ``responses``, ``reference``,
``principles``, ``metadata``; a checklist judge's ``question``; a judge of episodes' ``trajectory``
or ``trajectories``), never pre-rendered strings. Each template starts with a
``{# expects: a, b, c #}`` header naming the variables it uses; ``grm judge lint`` checks it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import SecurityError

from grm.base import regular_file_bytes
from grm.config.judge import JudgeLimits
from grm.config.template_size import MAX_TEMPLATE_CHARS
from grm.judges.errors import JudgeError
from grm.judges.sandbox import BoundedSandbox, RenderClock, RenderLimitError, RenderLimits, budget, shared_render_time

VARIABLES = (
    "prompt",
    "messages",
    "response",
    "responses",
    "reference",
    "principles",
    "metadata",
    "critique",
    "question",
    "trajectory",
    "trajectories",
)
"""Every variable a judge template may use (``trajectory``/``trajectories``: episodes, see
``grm.judges.trajectory_view``)."""

# "(.*?)\s*-?#\}" tried every split of a run of spaces inside the header (0.2 s at 4,000, minutes
# at 100,000: a hang on load and lint); "[^#]*" reads it in one pass.
_EXPECTS = re.compile(r"^\s*\{#-?\s*expects:([^#]*)#\}")


def _letter(i: int) -> str:
    return chr(ord("A") + i)


def _env() -> BoundedSandbox:
    # Immutable: a template reads the sample; it cannot change the metadata or messages every view
    # and later stage shares (``{{ metadata.update(...) }}`` is refused like ``__class__``).
    # Bounded: a render's steps, time and output are capped (``grm.judges.sandbox``).
    return BoundedSandbox(
        filters={"letter": _letter},
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


ENV = _env()
DEFAULT_LIMITS = RenderLimits()


class TemplateLimitError(JudgeError):
    """A render passed its ``RenderLimits`` (steps, time, characters); the message names the
    template file and line and the ``limits.template_*`` field that sets the bound."""


class TemplateSandboxError(JudgeError):
    """The sandbox refused what a template asked for (``__class__``, ``metadata.update(...)``)."""


class TemplateUndefinedError(JudgeError):
    """A render used a variable or field the data did not give (``metadata.topic`` on a row without one)."""


def render_limits(limits: JudgeLimits) -> RenderLimits:
    """A judge spec's ``limits`` as the bounds of one render of its templates."""
    return RenderLimits(
        max_chars=limits.template_max_chars, max_steps=limits.template_max_steps, timeout_s=limits.template_timeout_s
    )


@contextmanager
def shared_renders(limits: JudgeLimits, samples: int, what: str) -> Iterator[RenderClock]:
    """The renders inside share ``limits.template_timeout_s`` per sample (``samples``, at least 1)
    in all: a judgment renders many prompts, each under the limit on its own."""
    with shared_render_time(limits.template_timeout_s * max(1, samples), what) as clock:
        yield clock


@dataclass(frozen=True)
class Template:
    """A parsed template with its source, path and declared variables."""

    source: str
    path: str
    sha256: str
    expects: tuple[str, ...] | None
    compiled: jinja2.Template

    def render(self, *, limits: RenderLimits = DEFAULT_LIMITS, **variables: Any) -> str:
        """The template filled with ``variables`` (untrusted text is a value here, never template
        code), within ``limits``."""
        try:
            with budget(limits):
                return self.compiled.render(**variables).strip()
        except RenderLimitError as e:
            raise TemplateLimitError(f"{self._where(e)}: template stopped: {e}") from None
        except SecurityError as e:
            raise TemplateSandboxError(f"{self._where(e)}: template refused by the sandbox: {e}") from None
        except jinja2.UndefinedError as e:
            given = ", ".join(sorted(k for k, v in variables.items() if v is not None))
            raise TemplateUndefinedError(f"{self._where(e)}: {e.message}; variables given: {given}") from None
        except jinja2.TemplateError as e:
            raise JudgeError(f"{self._where(e)}: template error: {e}") from None
        except Exception as e:  # the template's own expressions may raise anything: 1/0, range(10**6), |letter on a word
            raise JudgeError(f"{self._where(e)}: template error while rendering: {type(e).__name__}: {e}") from None

    def _where(self, e: BaseException) -> str:
        """``path:LINE`` of the template line that raised ``e`` (Jinja maps its frames to template
        lines), or the path alone."""
        line, tb = None, e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<template>":
                line = tb.tb_lineno
            tb = tb.tb_next
        return f"{self.path}:{line}" if line else self.path

    def used_variables(self) -> set[str]:
        return set(meta.find_undeclared_variables(ENV.parse(self.source)))


def parse_template(source: str, path: str = "<template>") -> Template:
    if len(source) > MAX_TEMPLATE_CHARS:
        raise JudgeError(f"{path}: template is {len(source):,} characters; at most {MAX_TEMPLATE_CHARS:,}")
    try:
        compiled = ENV.compile_bounded(source)
    except jinja2.TemplateSyntaxError as e:
        raise JudgeError(f"{path}:{e.lineno}: template syntax error: {e.message}") from None
    except (RecursionError, SyntaxError, MemoryError):  # Python's own limits on the code Jinja generates
        raise JudgeError(f"{path}: template nests too deeply to compile") from None
    m = _EXPECTS.match(source)
    names = m.group(1).rstrip().removesuffix("-") if m else None  # "-#}" closes with whitespace control
    expects = tuple(v.strip() for v in names.split(",") if v.strip()) if names is not None else None
    return Template(
        source=source, path=path, sha256=hashlib.sha256(source.encode()).hexdigest(), expects=expects, compiled=compiled
    )


@lru_cache(maxsize=256)
def _load_cached(path: str, mtime: float, size: int) -> Template:
    # UTF-8 is at most 4 bytes a character: a larger file is refused unread (not read whole, then measured)
    raw = regular_file_bytes(Path(path), JudgeError, limit=4 * MAX_TEMPLATE_CHARS)
    if raw is None:
        raise JudgeError(f"{path}: template not found")
    try:
        source = template_source(raw)
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise JudgeError(f"{path}:{line}: template is not valid UTF-8") from None
    return parse_template(source, path)


def template_source(raw: bytes) -> str:
    """A template file's text as grm reads and hashes it: UTF-8, a leading byte order mark dropped
    (an editor's marker, not text: kept, it hid the ``expects`` header from lint and reached the
    model as the prompt's first character), line ends as ``\\n`` (as text mode read it).
    UnicodeDecodeError for bytes that are not UTF-8."""
    return raw.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")


def load_template(path: str | Path) -> Template:
    p = Path(path)
    if not p.is_file():
        raise JudgeError(f"{p}: template not found")
    st = p.stat()
    return _load_cached(str(p), st.st_mtime, st.st_size)


def lint_template(t: Template) -> list[str]:
    """Problems with a template alone: unknown variables, missing or inaccurate ``expects`` header."""
    problems = []
    used = t.used_variables()
    for name in sorted(used - set(VARIABLES) - {"loop"}):
        near = [v for v in VARIABLES if _close(name, v)]
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        problems.append(f"{t.path}: undefined variable '{name}'{hint}; judge templates get: {', '.join(VARIABLES)}")
    if t.expects is None:
        problems.append(f"{t.path}:1: missing '{{# expects: ... #}}' header naming the variables used")
    else:
        for name in sorted(set(t.expects) - used):
            problems.append(f"{t.path}: header expects '{name}' but the template never uses it")
        for name in sorted((used & set(VARIABLES)) - set(t.expects)):
            problems.append(f"{t.path}: uses '{name}' but the expects header does not list it")
    return problems


def _close(a: str, b: str) -> bool:
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio() >= 0.75
