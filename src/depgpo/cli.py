"""The `depgpo` command: one subcommand per stage of the data flow.

Each subcommand lives beside the code it drives and exposes `add_arguments(parser)` and `run(args) -> int`.
Those cli modules import only the standard library at top level (heavy imports happen inside `run`), so building
the parser stays cheap and `depgpo credit` never pays for torch or verl.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

# name -> (module, function adding the arguments, function running it, help)
SUBCOMMANDS = {
    "run-episode": ("depgpo.env.cli", "add_arguments", "run",
                    "run a task's commands in the traced sandbox, then its verifier"),
    "credit": ("depgpo.credit.cli", "add_arguments", "run", "dependency credit and step factors of trajectories"),
    "replay": ("depgpo.replay.cli", "add_replay", "run_replay",
               "replay a trajectory or agent log in its task's traced sandbox, with a fidelity check"),
    "counterfactual": ("depgpo.replay.cli", "add_counterfactual", "run_counterfactual",
                       "replay a trajectory without each command: which commands its reward needs, against credit"),
    "counterfactual-sample": ("depgpo.replay.cli", "add_counterfactual_sample", "run_counterfactual_sample",
                              "counterfactuals of a sample of an RL run's logged rollouts, both outcomes (the "
                              "report's credit scores)"),
    "data": ("depgpo.env.checks.check_cli", "add_arguments", "run", "check a task set: what would not run here, and why"),
    "generate-tasks": ("depgpo.tasks.generate_cli", "add_arguments", "run",
                       "write the tiny generated task sets (pool, test_tb20, test_tb21)"),
    "sft-data": ("depgpo.stages", "add_sft_data", "run_sft_data",
                 "SFT conversations from oracle solutions run in the sandbox"),
    "sft": ("depgpo.stages", "add_sft", "run_sft", "supervised fine-tuning of the policy"),
    "filter": ("depgpo.stages", "add_filter", "run_filter", "four-attempt task selection (Table 6)"),
    "rl": ("depgpo.stages", "add_rl", "run_rl", "RL training with one of the compared methods (resumable)"),
    "evaluate": ("depgpo.stages", "add_evaluate", "run_evaluate", "pass@1 over several rounds on a test set"),
    "launch": ("depgpo.launch", "add_arguments", "run",
               "run a GPU stage as a submitit job (Slurm where present) and wait for it"),
    "report": ("depgpo.report.cli", "add_arguments", "run", "the paper's tables and figures from results/"),
}

BAD_INPUT = 2  # exit code of bad configuration or input
# The extra of pyproject.toml that brings a missing top-level module: a bare `pip install depgpo` has the tracer,
# the sandbox, offline inference, credit and the report, not training.
EXTRA_OF = {"torch": "train", "transformers": "train", "tokenizers": "train", "safetensors": "train",
            "verl": "verl", "tensordict": "verl", "snakemake": "workflow", "submitit": "workflow"}
BROKEN_PIPE = 128 + 13  # the shell's status of a command killed by SIGPIPE


def main(argv: list[str] | None = None) -> int:
    # Before anything imports torch: the kernels every stage's numbers depend on (docs/reproducibility.md).
    from depgpo.numerics import pin_cpu_kernels

    pin_cpu_kernels()
    parser = argparse.ArgumentParser(prog="depgpo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, add, run, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module, _run=run)
        try:
            getattr(importlib.import_module(module), add)(sub_parser)
        except ModuleNotFoundError as e:  # a stage whose optional dependencies are missing stays listed
            if (e.name or "").startswith("depgpo"):
                raise
            sub_parser.set_defaults(_missing=_missing_module(e))
    args, extra = parser.parse_known_args(argv)
    # A subcommand whose positionals may follow its options (`depgpo credit t.json --format json beta=0.25`) names
    # them in `_positionals`; argparse alone stops collecting a positional list at the first option.
    collecting = getattr(args, "_positionals", None)
    if collecting and not any(item.startswith("-") for item in extra):
        getattr(args, collecting).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "_missing", None):
        print(f"error: depgpo {args.command} is unavailable: {args._missing}", file=sys.stderr)
        return BAD_INPUT
    try:
        return getattr(importlib.import_module(args._module), args._run)(args)
    except ModuleNotFoundError as e:
        # Stages import their heavy dependencies when they run: without the extra, one line instead of a traceback
        # (only where the package itself is absent, not a module missing inside an installed one).
        top = (e.name or "").split(".")[0]
        if top not in EXTRA_OF or importlib.util.find_spec(top) is not None:
            raise
        print(f"error: depgpo {args.command} is unavailable: {_missing_module(e)}", file=sys.stderr)
        return BAD_INPUT
    except BrokenPipeError:
        # The reader went away (`depgpo credit … | head`): stop quietly, as cat does. Python would otherwise
        # report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except SystemExit as exit_:
        # `raise SystemExit("error: …")` is how a stage rejects bad configuration or input before doing any work:
        # the one-line message on stderr, no traceback, and exit code 2 (as argparse does for a bad command line).
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
            return BAD_INPUT
        raise


def _missing_module(error: ModuleNotFoundError) -> str:
    extra = EXTRA_OF.get((error.name or "").split(".")[0])
    return f"{error} (pip install 'depgpo[{extra}]'; envs/setup.sh installs every extra)" if extra else str(error)


if __name__ == "__main__":
    sys.exit(main())
