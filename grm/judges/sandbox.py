"""The judge templates' Jinja2 sandbox, with a bound on the work one render may do.

Jinja's sandbox keeps a template away from Python's internals; by its own documentation it does not
bound resources. ``{% for i in range(10**5) %}{% for j in range(10**5) %}`` loops 10^10 times,
``'x' * 10**10`` asks for 10 GB in one operation, a macro that calls itself twice per level runs
2^depth calls, and a ``{% set %}`` block buffers whatever it captures. Every render here runs under a
``Budget`` (``RenderLimits``):

- *steps*: each loop iteration, call (functions, methods, macros, ``loop(...)``), filter,
  intercepted operator and output piece is one step, capped at ``max_steps``;
- *time*: the wall clock is read at every step and capped at ``timeout_s``: a backstop for steps
  that each scan long text (steps stay the deterministic bound). A judgment renders many times (a
  checklist judge one prompt per question, up to ``checklist.max_items``; a judge of episodes once
  per fitting round), so renders also share a ``RenderClock`` (``shared_render_time``): the
  renders of one sample's prompts, and of one ``grm judge`` command, share ``timeout_s``; those of
  a judge's batch get ``timeout_s`` per sample; a render stops at whichever deadline comes first
  (six 4 s renders of a checklist's questions stopped at 10 s, not 24 s);
- *size*: no value a template builds may exceed ``max_chars`` (a string's length; a container's
  items and their sizes, recursively): operations that multiply (``*``, ``**``, ``%``, ``~``, ``+``,
  ``|center``, ``|join``, ``.format``, ...) are checked *before* they run, from their operands, so
  ``'x' * 10**10`` is refused without allocating; every other call, filter and literal is checked on
  its result. Everything a render emits counts toward ``max_chars``, including text captured by
  macros, ``{% set %}`` and ``{% filter %}`` blocks that may never reach the prompt.

The template's AST is rewritten once, when it is compiled, so that loops, output, ``~`` and
list/tuple/dict literals go through the environment's hooks; operators and calls use the sandbox's
own hooks (``intercepted_binops``, ``call``) and filters are wrapped. Filters take the context, so
Jinja never folds a filter over constants at compile time (``{{ 'x'|center(10**10) }}`` would run
inside ``parse_template``), and intercepted operators are never folded either.

Values passed in (the sample) are not checked: their size is the data's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment
from jinja2.utils import pass_context
from jinja2.visitor import NodeTransformer

from grm.config.judge import JudgeLimits
from grm.judges.value_sizes import binop_size, filter_size, int_bits, method_size, size_of

MAX_INT_BITS = 65_536
"""Largest integer ``*`` and ``**`` may build (~19,700 digits; Python refuses to print past 4,300)."""


_SPEC_DEFAULTS = JudgeLimits()


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on one render; the judge spec's ``limits.template_*`` set them (and their defaults)."""

    max_chars: int = _SPEC_DEFAULTS.template_max_chars
    max_steps: int = _SPEC_DEFAULTS.template_max_steps
    timeout_s: float = _SPEC_DEFAULTS.template_timeout_s


class RenderLimitError(Exception):
    """A render passed one of its ``RenderLimits``; ``grm.judges.templates`` names the file and line."""

    def __init__(self, reason: str, knob: str | None = None, limit: object = None) -> None:
        super().__init__(f"{reason} (limits.{knob}: {limit})" if knob else reason)


class RenderClock:
    """Seconds a group of renders (``what``: one sample's prompts, a batch, a command) may spend in
    all, within any group it is part of (``parent``)."""

    def __init__(self, seconds: float, what: str, parent: RenderClock | None) -> None:
        self.seconds = seconds
        self.what = what
        self.parent = parent
        self.spent = 0.0

    def binding(self) -> RenderClock:
        """The clock of this chain with the least time left."""
        best: RenderClock = self
        clock = self.parent
        while clock is not None:
            if clock.left_own() < best.left_own():
                best = clock
            clock = clock.parent
        return best

    def left_own(self) -> float:
        return self.seconds - self.spent

    def spend(self, seconds: float) -> None:
        clock: RenderClock | None = self
        while clock is not None:
            clock.spent += seconds
            clock = clock.parent


_CLOCK: ContextVar[RenderClock | None] = ContextVar("grm_render_clock", default=None)


@contextmanager
def shared_render_time(seconds: float, what: str) -> Iterator[RenderClock]:
    """Renders inside share ``seconds`` in all (as well as any group this one is part of)."""
    clock = RenderClock(seconds, what, _CLOCK.get())
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


class Budget:
    """What one render has spent: steps, emitted characters, time."""

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.steps = 0
        self.chars = 0
        self.start = time.monotonic()
        self.deadline = self.start + limits.timeout_s
        self.late = f"the render ran longer than {limits.timeout_s:g} s"
        self.clock = _CLOCK.get()
        if self.clock is not None:
            shared = self.clock.binding()
            if shared.left_own() < limits.timeout_s:
                self.deadline = self.start + shared.left_own()
                self.late = (
                    f"the renders of {shared.what} ran longer than {shared.seconds:g} s in all (renders share it: "
                    "one judgment renders many prompts)"
                )

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise RenderLimitError(
                f"the render ran more than {self.limits.max_steps:,} steps (loop iterations, calls, filters, operators)",
                "template_max_steps",
                self.limits.max_steps,
            )
        if time.monotonic() > self.deadline:
            raise RenderLimitError(self.late, "template_timeout_s", self.limits.timeout_s)

    def fits(self, size: int, what: str) -> None:
        if size > self.limits.max_chars:
            raise RenderLimitError(
                f"{what} would build a value of more than {self.limits.max_chars:,} characters",
                "template_max_chars",
                self.limits.max_chars,
            )

    def emit(self, n: int) -> None:
        self.chars += n
        if self.chars > self.limits.max_chars:
            raise RenderLimitError(
                f"the render emitted more than {self.limits.max_chars:,} characters "
                "(text captured by macros and blocks included)",
                "template_max_chars",
                self.limits.max_chars,
            )


_BUDGET: ContextVar[Budget | None] = ContextVar("grm_template_budget", default=None)


@contextmanager
def budget(limits: RenderLimits) -> Iterator[Budget]:
    """Run a render under a fresh budget (per thread and per task: a ``ContextVar``), its time
    charged to the current ``RenderClock``."""
    b = Budget(limits)
    token = _BUDGET.set(b)
    try:
        yield b
    finally:
        _BUDGET.reset(token)
        if b.clock is not None:
            b.clock.spend(time.monotonic() - b.start)


def _current() -> Budget:
    b = _BUDGET.get()
    if b is None:  # a compiled template rendered around Template.render would run unbounded
        raise RenderLimitError("rendered outside grm.judges.templates.Template.render, which bounds it")
    return b


def _called(obj: Any) -> str:
    """A callable's name for a message: a function's, a method's, a macro's."""
    name = getattr(obj, "__name__", None) or getattr(obj, "name", None)
    return name if isinstance(name, str) else type(obj).__name__


# --------------------------------------------------------------------------- the environment


class _Bounded(NodeTransformer):
    """Routes loops, output, ``~`` and literals through the environment's hooks (see module doc)."""

    def _hook(self, name: str, node: nodes.Node, *args: nodes.Expr) -> nodes.Call:
        return nodes.Call(nodes.EnvironmentAttribute(name), list(args), [], None, None, lineno=node.lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self._hook("bounded_iter", node.iter, node.iter)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [self._hook("bounded_output", child, child) for child in node.nodes]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return self._hook("bounded_concat", node, *node.nodes)

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":  # a target: {% set a, b = ... %}
            return node
        return self._hook("bounded_literal", node, node)

    visit_List = visit_Tuple = visit_Dict = _literal


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """An immutable Jinja2 sandbox whose renders stay inside the current ``Budget``."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, filters: dict[str, Callable[..., Any]] | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)  # lorem ipsum of any length: nothing a judge prompt needs
        self.globals["range"] = self.bounded_range
        every = {**self.filters, **(filters or {})}
        self.filters = {name: self._bounded_filter(name, f) for name, f in every.items()}

    def compile_bounded(self, source: str) -> jinja2.Template:
        """``source`` compiled with every loop, output and literal routed through the budget."""
        ast = self.parse(source)
        other = next(ast.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)), None)
        if other is not None:  # no loader: it would fail at every render, and a path would be data-chosen
            raise jinja2.TemplateSyntaxError(
                "include, import and extends are not supported: a judge template is one file (copy the part in, or use a macro)",
                other.lineno,
            )
        ast = _Bounded().visit(ast)
        ast.set_environment(self)
        return self.from_string(ast)

    # -- hooks the rewritten AST calls (through ``call``, which counts the step); named apart from
    # Environment's own attributes (``concat`` is how Jinja joins a render)
    def bounded_iter(self, iterable: Any) -> Iterator[Any]:
        b = _current()
        for item in iterable:
            b.step()
            yield item

    def bounded_range(self, *args: int) -> range:
        # Jinja's own cap (MAX_RANGE), raised as a limit so that `grm judge lint` reports it too
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise RenderLimitError(f"range() of {len(r):,} items: a template may ask for at most {MAX_RANGE:,}")
        return r

    def bounded_output(self, value: Any) -> str:
        b = _current()
        b.step()
        if not isinstance(value, str):
            b.fits(size_of(value, b.limits.max_chars), "printing a value")
        text = str(value)
        b.emit(len(text))
        return text

    def bounded_concat(self, *parts: Any) -> str:
        b = _current()
        b.step()
        b.fits(sum(size_of(p, b.limits.max_chars) for p in parts), "'~'")
        return "".join(str(p) for p in parts)

    def bounded_literal(self, value: Any) -> Any:
        b = _current()
        b.step()
        b.fits(size_of(value, b.limits.max_chars), "a literal")
        return value

    # -- the sandbox's own hooks
    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        b = _current()
        b.step()
        b.fits(binop_size(operator, left, right, b.limits.max_chars), f"'{operator}'")
        if int_bits(operator, left, right) > MAX_INT_BITS:
            raise RenderLimitError(f"'{operator}' would build an integer of more than {MAX_INT_BITS:,} bits")
        result = super().call_binop(context, operator, left, right)
        b.fits(size_of(result, b.limits.max_chars), f"'{operator}'")
        return result

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (the sandbox's signature)
        if getattr(__obj, "__self__", None) is __self:  # the hooks above, which count their own steps
            return __obj(*args)  # kwargs: only Jinja's own _loop_vars/_block_vars, which they do not take
        b = _current()
        b.step()
        cap = b.limits.max_chars
        name = _called(__obj)
        b.fits(method_size(__obj, args, kwargs, cap), f"{name}()")
        result = ImmutableSandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs)
        b.fits(size_of(result, cap), f"{name}()")
        return result

    def _bounded_filter(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        pass_arg = getattr(f, "jinja_pass_arg", None)
        extra: Callable[[Context], tuple[Any, ...]] = {
            "context": lambda c: (c,),
            "eval_context": lambda c: (c.eval_ctx,),
            "environment": lambda c: (c.environment,),
        }.get(getattr(pass_arg, "name", ""), lambda c: ())

        @pass_context
        @functools.wraps(f)
        def bounded(context: Context, value: Any, *args: Any, **kwargs: Any) -> Any:
            b = _current()
            b.step()
            b.fits(filter_size(name, value, args, kwargs, b.limits.max_chars), f"|{name}")
            result = f(*extra(context), value, *args, **kwargs)
            b.fits(size_of(result, b.limits.max_chars), f"|{name}")
            return result

        return bounded
