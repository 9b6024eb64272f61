"""What a spec's ``target`` may name: the user's own code, never the standard library.

A ``target`` (a ``target`` parser's ``package.module:function``, an environment's or agent's
``path``) is imported and called by grm: at load (``grm validate`` builds every judge), on each
``grm judge lint`` example, on every critique. Targets are the user's trusted code by design, but a
spec must not be able to name a function that was never meant to be called that way: ``os:system``
runs a shell command per example output, ``builtins:input`` blocks on stdin, and importing ``this``
prints to stdout. So:

- ``target_problem`` (before anything is imported; the config models call it): the module's
  top-level package may not be one of the standard library's (``sys.stdlib_module_names``, which
  holds ``builtins``) nor ``__main__``, and a module named by file may not be a file of the
  standard library;
- ``loaded_target_problem`` (after the import, by whoever imports it: ``grm.judges.parsers``,
  ``grm.envs.base``): what was found must be callable, and the code it runs (a function's, a
  class's, a callable instance's class) must not come from the standard library or builtins,
  whatever module re-exported it (``mymod:system`` after ``from os import system``, a
  ``functools.partial``); a user's module may re-export its own or a third-party package's code.
"""

from __future__ import annotations

import inspect
import sys
import sysconfig
from pathlib import Path
from typing import Any

_REFUSED = frozenset(sys.stdlib_module_names) | {"__main__"}


def _stdlib_dirs() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    return tuple({Path(paths[k]).resolve() for k in ("stdlib", "platstdlib") if k in paths})


def module_problem(module: str) -> str | None:
    """Why the module ``module`` (dotted) may not hold a target, or None."""
    top = module.split(".", 1)[0]
    if top in _REFUSED:
        return (
            f"'{top}' is {'the entry script' if top == '__main__' else 'a standard library module'}; a target names your own code"
        )
    return None


def file_problem(path: Path) -> str | None:
    """Why the Python file ``path`` may not hold a target (a file of the standard library), or None."""
    try:
        found = path.expanduser().resolve()
    except (OSError, RuntimeError):  # a loop of links, ~ without a home: the import reports the file
        return None
    for root in _stdlib_dirs():
        site = root / "site-packages"
        if found.is_relative_to(root) and not found.is_relative_to(site):
            return f"{found} is a file of the standard library; a target names your own code"
    return None


def target_problem(target: str) -> str | None:
    """Why ``MODULE:NAME`` (a dotted module) may not be imported as a target, or None. Checked on
    the text alone: nothing is imported."""
    module, _, _ = target.partition(":")
    return module_problem(module.strip())


def loaded_target_problem(found: Any) -> str | None:
    """Why ``found`` (the object a target named, once imported) may not be called as one: the code it
    runs (a function's, a class's, or a callable instance's class) must not come from the standard
    library or builtins, whatever module re-exported it (``mymodule:system`` after ``from os import
    system``). None when it may."""
    fn = found.__func__ if inspect.ismethod(found) else found
    if not callable(fn):
        return f"is a {type(found).__name__}, not a function or class"
    owner = fn if inspect.isfunction(fn) or inspect.isclass(fn) or inspect.isbuiltin(fn) else type(fn)
    defined = getattr(owner, "__module__", None) or "builtins"
    why = module_problem(defined)
    return None if why is None else f"runs code of {defined}: {why}"
