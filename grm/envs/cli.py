"""``grm envs``: the environments subcommand. ``grm/cli.py`` registers it with ``add_parser``;
only argparse is imported here, so ``grm --help`` stays light."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Add ``grm envs list`` to the top-level subparsers ``sub``."""
    e = sub.add_parser("envs", help="environments for multi-turn, tool-using episodes")
    esub = e.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    el = esub.add_parser("list", help="list the shipped environments (use one by name, or give PATH.py:Class)")
    el.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from grm.envs.base import list_envs
    from grm.terminal import console

    table = Table(title="shipped environments")
    for col in ("name", "class", "what it is"):
        table.add_column(col)
    for row in list_envs():
        table.add_row(*row)
    console().print(table)
    print("Also accepted: path/to/file.py:Class (relative to the pipeline) or package.module:Class.")
    return 0
