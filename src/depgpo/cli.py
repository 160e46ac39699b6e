"""The `depgpo` command: one subcommand per stage of the data flow.

Each subcommand lives beside the code it drives and exposes `add_arguments(parser)` and `run(args) -> int`.
Those cli modules import only the standard library at top level (heavy imports happen inside `run`), so building
the parser stays cheap and `depgpo credit` never pays for torch or verl.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "run-episode": ("depgpo.env.cli", "run a task's commands in the traced sandbox, then its verifier"),
    "credit": ("depgpo.credit.cli", "dependency credit and step factors of trajectories"),
    "data": ("depgpo.tasks.cli", "check a task set: what would not run here, and why"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="depgpo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module)
        try:
            importlib.import_module(module).add_arguments(sub_parser)
        except ModuleNotFoundError as e:  # a stage whose optional dependencies are missing stays listed
            if (e.name or "").startswith("depgpo"):
                raise
            sub_parser.set_defaults(_missing=str(e))
    args = parser.parse_args(argv)
    if getattr(args, "_missing", None):
        print(f"error: depgpo {args.command} is unavailable: {args._missing}", file=sys.stderr)
        return 2
    return importlib.import_module(args._module).run(args)


if __name__ == "__main__":
    sys.exit(main())
