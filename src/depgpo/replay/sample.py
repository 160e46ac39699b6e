"""`depgpo counterfactual-sample`: counterfactual replays of a sample of an RL run's logged rollouts, of both
outcomes, as the input of the report's credit scores (docs/replay.md#scores, rule `counterfactual`).

An RL run logs its rollouts under `rl/{run}/seed*/trajectories/update*.jsonl`, one trajectory.json record a line
(with `num_turns` and `anchor_keys`), each naming its task's directory in `task.path`. `depgpo counterfactual`
takes one task per call and one file per trajectory; this adapter draws the sample, writes each drawn record as its
own trajectory.json, and runs the counterfactual of each against the task it names.

The draw: the rollouts with reward > 0 (successes) and the others (failures), each shuffled with `--seed`, then
`--per-outcome` of each taken, a task not yet drawn first (the scores' intervals resample tasks, so distinct tasks
are worth more than a second rollout of one). Output: OUT (one counterfactual object a line, as `depgpo
counterfactual --format json` prints it, plus `logged` (FILE:LINE) and `gigpo_group` (the anchor keys and rewards of
the rollouts of its task in its update file, for GiGPO's step advantages in the scores), and beside it OUT's stem as
a directory holding each replay (a) (`NNN/trajectory.json`), which the objects name relative to OUT's directory so
that the tree can move.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

UPDATE_GLOB = "trajectories/update*.jsonl"


class SampleError(ValueError):
    """A rollout source that cannot be sampled; the message names the file and the fix."""


def rollout_files(sources: list[Path]) -> list[Path]:
    """The update files of each source: an update*.jsonl itself, a run's seed directory, or a run directory."""
    files = []
    for source in map(Path, sources):
        if source.is_file():
            files.append(source)
            continue
        found = sorted(source.glob(UPDATE_GLOB)) or sorted(source.glob(f"seed*/{UPDATE_GLOB}"))
        if not found:
            raise SampleError(f"{source}: no {UPDATE_GLOB} (nor seed*/{UPDATE_GLOB}) in it; give an RL run's seed "
                              "directory (rl/{run}/seed{s}) or its update files")
        files += found
    return files


def read_rollouts(files: list[Path]) -> tuple[list[tuple[str, dict]], dict[str, dict]]:
    """(name, record) of every rollout that can be drawn, the name FILE:LINE; and per name its GiGPO group (see
    gigpo_groups)."""
    rollouts, every = [], []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SampleError(f"{path} line {number}: not JSON ({error}); expected one trajectory record a "
                                  "line, as `depgpo rl` logs them") from error
            task = record.get("task") if isinstance(record, dict) else None
            if not isinstance(task, dict):
                continue  # not a trajectory record
            every.append((path, f"{path}:{number}", record))
            if not isinstance(task.get("path"), str) or not record.get("commands"):
                continue  # no task directory to replay in, or nothing to replay: not drawn
            rollouts.append((f"{path}:{number}", record))
    return rollouts, gigpo_groups(every)


def gigpo_groups(records: list[tuple[Path, str, dict]]) -> dict[str, dict]:
    """Per rollout, the group GiGPO's step advantages compare it with: the rollouts of the same task in the same
    update file (`depgpo rl` samples a task's K rollouts together in one update), each its logged `anchor_keys` and
    reward, and which member it is. Rollouts logged without anchor keys get none."""
    members: dict[tuple, list[tuple[str, dict]]] = {}
    for path, name, record in records:
        if isinstance(record.get("anchor_keys"), list):
            members.setdefault((str(path), record["task"].get("id")), []).append((name, record))
    groups = {}
    for group in members.values():
        anchors = [[str(key) for key in record["anchor_keys"]] for _, record in group]
        rewards = [_reward(record) for _, record in group]
        for member, (name, _) in enumerate(group):
            groups[name] = {"anchor_keys": anchors, "rewards": rewards, "member": member}
    return groups


def draw(rollouts: list[tuple[str, dict]], per_outcome: int, seed: int) -> list[tuple[str, dict]]:
    """`per_outcome` successes and `per_outcome` failures, distinct tasks first (module docstring)."""
    drawn = []
    for success in (True, False):
        pool = [item for item in rollouts if (_reward(item[1]) > 0) == success]
        random.Random(seed).shuffle(pool)
        first, rest, seen = [], [], set()
        for item in pool:
            task = item[1]["task"].get("id")
            (rest if task in seen else first).append(item)
            seen.add(task)
        drawn += (first + rest)[:per_outcome]
    return drawn


def _reward(record: dict) -> float:
    reward = (record.get("verifier") or {}).get("reward")
    return float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else 0.0


def run_sample(sources: list[Path], per_outcome: int, seed: int, out: Path, episode, credit, workers: int,
               report) -> int:
    """Write OUT and the kept replays; `report(line)` for each rollout that could not be replayed. Returns how many
    counterfactual objects were written."""
    from depgpo.replay.counterfactual import counterfactual
    from depgpo.replay.source import read_sources

    rollouts, groups = read_rollouts(rollout_files(sources))
    drawn = draw(rollouts, per_outcome, seed)
    if not drawn:
        report(f"{', '.join(map(str, sources))}: no logged rollout with commands and a task path to draw; the "
               f"sample in {out} is empty")
    kept_root = out.parent / out.stem
    kept_root.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(out, "w") as results:
        for number, (name, record) in enumerate(drawn):
            directory = kept_root / f"{number:03d}"
            directory.mkdir(parents=True, exist_ok=True)
            logged = directory / "logged.json"  # the rollout as logged: the source the replay reads
            logged.write_text(json.dumps(record))
            task_dir = Path(record["task"]["path"])
            try:
                (source,) = read_sources(logged)
                result, lines = counterfactual(source, task_dir, episode, credit, workers, directory)
            except Exception as error:  # noqa: BLE001 - one rollout must not stop the sample; the reason is said
                report(f"{name}: not replayed: {type(error).__name__}: {error}")
                continue
            for line in lines:
                report(f"{name}: {line}")
            result["trajectory"] = str((directory / "trajectory.json").relative_to(out.parent))
            result["logged"] = name
            result["gigpo_group"] = groups.get(name)  # the scores' GiGPO step advantages (report.scores)
            results.write(json.dumps(result) + "\n")
            written += 1
    return written
