"""Counterfactual replays of one trajectory: does its outcome depend on the commands DepGPO credits?

The plan, each a replay from the task's initial state (run.run_commands), side by side (`agent.workers`):
  (a) the commands as they are: the reward, and the traced trajectory whose credit is checked; run a second time
      beside the others, to say whether the reward is reproducible at all;
  (b) without each command in turn: a command is *necessary* when removing it lowers the reward. With a removal
      budget (`removals`), a longer trajectory gets (b) for every credited command and a seeded uniform sample of
      the others; each command carries its `weight`, the inverse of its chance of being removed (0: not removed, no
      label), so the scores stay unbiased for every weighting;
  (c) only the commands DepGPO credits (q > 0): the credit is *sufficient* when this earns (a)'s reward;
  (d) for each credited read (info > 0), all commands in the task drawn with other values for what the read
      showed (perturb.py): a lower reward says the outcome depended on what the agent saw. Where the task cannot be
      redrawn, reward_perturbed is null and `perturbation` says why;
  (e) on a reproducible success, a minimal sufficient set of commands from replays of subsets (subsets.py), the
      label that sees what (b) cannot: of two writes that each suffice, it keeps one. `subset_budget` bounds it.

The result is one JSON object per trajectory, with per command everything the scores need (q, its parts, its turn,
the step factors, reward_without, necessary), so precision, recall, AUROC and step-factor mass can be computed from
it directly (docs/replay.md).
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from depgpo.agent.loop import map_in_threads
from depgpo.credit import CreditConfig, credit_with_fallback
from depgpo.env.episode import EpisodeConfig
from depgpo.replay import perturb, subsets
from depgpo.replay.run import problems, replay, run_commands
from depgpo.replay.source import ReplaySource
from depgpo.tasks import load_task


@dataclass(frozen=True)
class Variant:
    kind: str                 # repeat | without | credited | perturbed | subset
    keep: tuple[int, ...]     # indices of (a)'s commands that this replay runs
    index: int | None = None  # the command it is about (without, perturbed)
    task_dir: Path | None = None  # perturbed: the redrawn task


def removal_weights(n: int, credited: tuple[int, ...], removals: int | None, seed: int) -> list[float]:
    """Per command, the inverse of its chance of a (b) replay; 0 where it gets none. Every command when there is no
    budget or the trajectory fits in it; else every credited one and a uniform sample of the others, of
    `removals` minus the credited (at least half the budget, so that recall and AUROC keep pairs)."""
    if removals is None or n <= removals:
        return [1.0] * n
    rest = [k for k in range(n) if k not in credited]
    drawn = random.Random(seed).sample(rest, min(len(rest), max(removals - len(credited), math.ceil(removals / 2))))
    weights = [1.0 if k in credited else 0.0 for k in range(n)]
    for k in drawn:
        weights[k] = len(rest) / len(drawn)
    return weights


def plan(trajectory: dict, credit, work: Path, removals: int | None = None,
         seed: int = 0) -> tuple[list[Variant], dict[int, str], list[float]]:
    """The replays (b)-(d) of a replayed trajectory with its credit; per credited read what (d) changes; and each
    command's removal weight (removal_weights)."""
    n = len(trajectory["commands"])
    every = tuple(range(n))
    credited = tuple(c.index for c in credit.commands if c.q > 0)
    weights = removal_weights(n, credited, removals, seed)
    # (a) once more: a reward that changes between two identical replays makes every necessity below unreliable.
    variants = [Variant("repeat", every)]
    variants += [Variant("without", tuple(i for i in every if i != k), k) for k in every if weights[k] > 0]
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
    return variants, notes, weights


def counterfactual(source: ReplaySource, task_dir: Path, episode: EpisodeConfig, credit_config: CreditConfig,
                   workers: int, out_dir: Path | None = None, removals: int | None = None,
                   seed: int = 0, subset_budget: int | None = None) -> tuple[dict, list[str]]:
    """The counterfactual object of one source, and the lines to tell the user (hung commands, divergence).
    `removals`: the budget of (b) replays for a long trajectory (removal_weights); `subset_budget`: of (e)'s new
    replays (None: as many as the search takes). Raises ReplayError (from run.check_replayable) when it cannot be
    replayed at all."""
    started = time.monotonic()
    task = load_task(task_dir)
    with tempfile.TemporaryDirectory(prefix="depgpo-counterfactual-") as scratch:
        work = Path(scratch)
        full = replay(source, task, episode, out_dir or work / "replay")
        credit = credit_with_fallback(full, credit_config, full.get("num_turns"))
        variants, notes, weights = plan(full, credit, work, removals, seed)
        texts = [c["text"] for c in full["commands"]]
        turns = [c["turn"] for c in full["commands"]]

        def run(variant: Variant) -> float | None:
            target = load_task(variant.task_dir) if variant.task_dir is not None else task
            result = run_commands(target, [texts[i] for i in variant.keep], [turns[i] for i in variant.keep],
                                  episode)
            return result["verifier"]["reward"]

        rewards = list(map_in_threads(run, variants, workers))
        found = _sufficient_set(full, variants, rewards, run, subset_budget)
    result = _result(source, full, credit, variants, rewards, notes, weights, time.monotonic() - started, found)
    lines = problems(source, full, episode.command_timeout_s)
    if not result["reproducible"]:
        lines.append(f"{source.name}: the replay's reward is not reproducible ({result['reward']} then "
                     f"{result['reward_repeat']} for the same commands), so its necessity is not reliable; look for "
                     "commands that race (a server not yet up, a background job) and give them time to finish")
    # The kept replay (a): credit variants (other β, the ablations) can be scored on it without replaying again.
    result["trajectory"] = str(Path(out_dir) / "trajectory.json") if out_dir is not None else None
    return result, lines


def _sufficient_set(full: dict, variants: list[Variant], rewards: list, run: Callable[[Variant], float | None],
                    budget: int | None) -> subsets.SufficientSet | str:
    """(e) on a reproducible success, from what (a)-(c) replayed; else why not."""
    reward = full["verifier"]["reward"]
    repeated = next(r for v, r in zip(variants, rewards) if v.kind == "repeat")
    if not reward or reward <= 0:
        return "not a success: with reward 0 every subset, the empty one too, earns it"
    if repeated != reward:
        return "not reproducible: a subset's reward could not be told from noise"
    n = len(full["commands"])
    known = {tuple(sorted(v.keep)): not _lower(r, reward) for v, r in zip(variants, rewards)
             if v.kind in ("without", "credited")}
    necessary: list[bool | None] = [None] * n
    for v, r in zip(variants, rewards):
        if v.kind == "without":
            necessary[v.index] = _lower(r, reward)
    return subsets.search(n, necessary, lambda keep: not _lower(run(Variant("subset", keep)), reward), known,
                          budget)


def _result(source: ReplaySource, full: dict, credit, variants: list[Variant], rewards: list, notes: dict,
            weights: list[float], seconds: float, found: subsets.SufficientSet | str) -> dict:
    reward = full["verifier"]["reward"]
    searched = isinstance(found, subsets.SufficientSet)
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
            "reward_without": without.get(k), "necessary": _lower(without[k], reward) if k in without else None,
            "weight": weights[k], "in_sufficient_set": found.labels[k] if searched else None,
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
        "removal_sample": _sample_sizes(weights),
        "sufficient_set": {"kept": list(found.kept), "complete": found.complete, "replays": found.replays}
        if searched else None, "sufficient_set_note": None if searched else found,
        "cost": {"replays": 1 + len(variants) + (found.replays if searched else 0), "seconds": round(seconds, 3),
                 "seconds_per_command": round(seconds / max(1, len(commands)), 3)},
    }


def _sample_sizes(weights: list[float]) -> dict | None:
    """(others, drawn) of a --removals sample; None when every command was removed."""
    drawn = [w for w in weights if w not in (0.0, 1.0)]  # every drawn one weighs others/drawn > 1
    return {"others": round(drawn[0] * len(drawn)), "drawn": len(drawn)} if drawn else None


def _lower(value: float | None, reference: float | None) -> bool:
    """Removing the command lowered the reward (an unverified replay counts as reward 0)."""
    return (value or 0.0) < (reference or 0.0)


def format_table(result: dict) -> str:
    lines = [f"== {result['source']} (task {result['task']}): reward {result['reward']}, credited only "
             f"{result['reward_credited_only']} ({'sufficient' if result['sufficient'] else 'not sufficient'}); "
             f"{result['cost']['replays']} replays in {result['cost']['seconds']} s",
             _set_line(result),
             f"{'idx':>3} {'q':>6} {'without':>7} {'necessary':>9} {'in set':>6} {'perturbed':>9}  command"]
    for c in result["commands"]:
        perturbed = "-" if not c["credited_read"] else "n/a" if c["reward_perturbed"] is None \
            else f"{c['reward_perturbed']:g}"
        first = (c["text"].splitlines() or [""])[0][:60]
        without = "-" if c["necessary"] is None else f"{c['reward_without']:g}"
        in_set = "-" if c.get("in_sufficient_set") is None else str(c["in_sufficient_set"])
        lines.append(f"{c['index']:>3} {c['credit']:>6.3f} {without:>7} {str(c['necessary']):>9} {in_set:>6} "
                     f"{perturbed:>9}  {first}")
    for item in result["unreplayable"]:
        lines.append(f"    not replayed (turn {item['turn']}, {item['kind']}): {item['detail']}")
    return "\n".join(lines)


def _set_line(result: dict) -> str:
    found = result.get("sufficient_set")
    if found is None:
        return f"minimal sufficient set: none ({result.get('sufficient_set_note')})"
    state = "" if found["complete"] else ", incomplete: the --subsets budget ran out"
    return f"minimal sufficient set: {found['kept']} ({found['replays']} replays of subsets{state})"
