"""Counterfactual replays of one trajectory: does its outcome depend on the commands DepGPO credits?

The plan, each a replay from the task's initial state (run.run_commands), side by side (`agent.workers`):
  (a) the commands as they are: the reward, and the traced trajectory whose credit is checked; run a second time
      beside the others, to say whether the reward is reproducible at all;
  (b) without each command in turn: a command is *necessary* when removing it lowers the reward;
  (c) only the commands DepGPO credits (q > 0): the credit is *sufficient* when this earns (a)'s reward;
  (d) for each credited read (info > 0), all commands in the task drawn with other values for what the read
      showed (perturb.py): a lower reward says the outcome depended on what the agent saw. Where the task cannot be
      redrawn, reward_perturbed is null and `perturbation` says why.

The result is one JSON object per trajectory, with per command everything the scores need (q, its parts, its turn,
the step factors, reward_without, necessary), so precision, recall, AUROC and step-factor mass can be computed from
it directly (docs/replay.md).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from depgpo.agent.loop import map_in_threads
from depgpo.credit import CreditConfig, credit_with_fallback
from depgpo.env.episode import EpisodeConfig
from depgpo.replay import perturb
from depgpo.replay.run import problems, replay, run_commands
from depgpo.replay.source import ReplaySource
from depgpo.tasks import load_task


@dataclass(frozen=True)
class Variant:
    kind: str                 # repeat | without | credited | perturbed
    keep: tuple[int, ...]     # indices of (a)'s commands that this replay runs
    index: int | None = None  # the command it is about (without, perturbed)
    task_dir: Path | None = None  # perturbed: the redrawn task


def plan(trajectory: dict, credit, work: Path) -> tuple[list[Variant], dict[int, str]]:
    """The replays (b)-(d) of a replayed trajectory with its credit; and per credited read what (d) changes."""
    n = len(trajectory["commands"])
    every = tuple(range(n))
    # (a) once more: a reward that changes between two identical replays makes every necessity below unreliable.
    variants = [Variant("repeat", every)]
    variants += [Variant("without", tuple(i for i in every if i != k), k) for k in every]
    credited = tuple(c.index for c in credit.commands if c.q > 0)
    variants.append(Variant("credited", credited))
    notes: dict[int, str] = {}
    task_dir = Path(trajectory["task"]["path"])
    for command in credit.commands:
        if command.q > 0 and command.info > 0:
            mapping, notes[command.index] = perturb.value_map(task_dir, trajectory["commands"][command.index]
                                                              ["observation"])
            if mapping is not None:
                redrawn = perturb.perturbed_task(task_dir, mapping, work / f"perturbed-{command.index}" / task_dir.name)
                variants.append(Variant("perturbed", every, command.index, redrawn))
    return variants, notes


def counterfactual(source: ReplaySource, task_dir: Path, episode: EpisodeConfig, credit_config: CreditConfig,
                   workers: int, out_dir: Path | None = None) -> tuple[dict, list[str]]:
    """The counterfactual object of one source, and the lines to tell the user (hung commands, divergence).
    Raises ReplayError (from run.check_replayable) when it cannot be replayed at all."""
    started = time.monotonic()
    task = load_task(task_dir)
    with tempfile.TemporaryDirectory(prefix="depgpo-counterfactual-") as scratch:
        work = Path(scratch)
        full = replay(source, task, episode, out_dir or work / "replay")
        credit = credit_with_fallback(full, credit_config, full.get("num_turns"))
        variants, notes = plan(full, credit, work)
        texts = [c["text"] for c in full["commands"]]
        turns = [c["turn"] for c in full["commands"]]

        def run(variant: Variant) -> float | None:
            target = load_task(variant.task_dir) if variant.task_dir is not None else task
            result = run_commands(target, [texts[i] for i in variant.keep], [turns[i] for i in variant.keep],
                                  episode)
            return result["verifier"]["reward"]

        rewards = list(map_in_threads(run, variants, workers))
    result = _result(source, full, credit, variants, rewards, notes, time.monotonic() - started)
    lines = problems(source, full, episode.command_timeout_s)
    if not result["reproducible"]:
        lines.append(f"{source.name}: the replay's reward is not reproducible ({result['reward']} then "
                     f"{result['reward_repeat']} for the same commands), so its necessity is not reliable; look for "
                     "commands that race (a server not yet up, a background job) and give them time to finish")
    # The kept replay (a): credit variants (other β, the ablations) can be scored on it without replaying again.
    result["trajectory"] = str(Path(out_dir) / "trajectory.json") if out_dir is not None else None
    return result, lines


def _result(source: ReplaySource, full: dict, credit, variants: list[Variant], rewards: list, notes: dict,
            seconds: float) -> dict:
    reward = full["verifier"]["reward"]
    without = {v.index: r for v, r in zip(variants, rewards) if v.kind == "without"}
    perturbed = {v.index: r for v, r in zip(variants, rewards) if v.kind == "perturbed"}
    credited_reward = next(r for v, r in zip(variants, rewards) if v.kind == "credited")
    repeated = next(r for v, r in zip(variants, rewards) if v.kind == "repeat")
    by_index = {c.index: c for c in credit.commands}
    commands = []
    for record in full["commands"]:
        k = record["index"]
        c = by_index.get(k)
        read = c is not None and c.q > 0 and c.info > 0
        commands.append({
            "index": k, "logged_index": full["replay"]["logged_index"][k], "turn": record["turn"],
            "text": record["text"], "credit": c.q if c else 0.0, "role": c.role if c else None,
            "direct": c.direct if c else 0.0, "indirect": c.indirect if c else 0.0, "info": c.info if c else 0.0,
            "is_write": c.is_write if c else None,
            "reward_without": without[k], "necessary": _lower(without[k], reward),
            "credited_read": read, "reward_perturbed": perturbed.get(k) if read else None,
            "perturbation": notes.get(k) if read else None,
        })
    return {
        "source": source.name, "task": full["task"]["id"], "reward": reward, "reward_repeat": repeated,
        "reproducible": repeated == reward,
        "reward_credited_only": credited_reward, "sufficient": credited_reward == reward,
        "credited": [c.index for c in credit.commands if c.q > 0],
        "credit_fallback": credit.fallback, "turn_credit": credit.turn_credit, "step_factors": credit.step_factors,
        "commands": commands, "fidelity": full["replay"]["fidelity"],
        "unreplayable": full["replay"]["unreplayable"],
        "cost": {"replays": 1 + len(variants), "seconds": round(seconds, 3),
                 "seconds_per_command": round(seconds / max(1, len(commands)), 3)},
    }


def _lower(value: float | None, reference: float | None) -> bool:
    """Removing the command lowered the reward (an unverified replay counts as reward 0)."""
    return (value or 0.0) < (reference or 0.0)


def format_table(result: dict) -> str:
    lines = [f"== {result['source']} (task {result['task']}): reward {result['reward']}, credited only "
             f"{result['reward_credited_only']} ({'sufficient' if result['sufficient'] else 'not sufficient'}); "
             f"{result['cost']['replays']} replays in {result['cost']['seconds']} s",
             f"{'idx':>3} {'q':>6} {'without':>7} {'necessary':>9} {'perturbed':>9}  command"]
    for c in result["commands"]:
        perturbed = "-" if not c["credited_read"] else "n/a" if c["reward_perturbed"] is None \
            else f"{c['reward_perturbed']:g}"
        first = (c["text"].splitlines() or [""])[0][:60]
        lines.append(f"{c['index']:>3} {c['credit']:>6.3f} {c['reward_without']:>7g} {str(c['necessary']):>9} "
                     f"{perturbed:>9}  {first}")
    for item in result["unreplayable"]:
        lines.append(f"    not replayed (turn {item['turn']}, {item['kind']}): {item['detail']}")
    return "\n".join(lines)
