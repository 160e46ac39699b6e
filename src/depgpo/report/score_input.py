"""The counterfactual objects the credit scores read (report.scores, docs/replay.md#scores): one JSON object a line
as `depgpo counterfactual --format json --out DIR` prints it, and its kept replay (a). A malformed object raises
BadInput naming the file, line, field and fix.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from depgpo.report.load import BadInput, read_jsonl

FIX = "rewrite it with `depgpo counterfactual TRAJ --task TASK_DIR --format json --out DIR`"


@dataclass
class Counterfactual:
    path: str         # the file and line, for messages
    task: str
    reward: float     # (a)'s reward; an unverified replay counts as 0
    reproducible: bool
    commands: list[dict]  # index, turn, necessary, reward_without
    trajectory: dict  # the kept replay (a)
    gigpo_group: dict | None = None  # counterfactual-sample: the logged group's anchor_keys, rewards, member
    removal_sample: tuple[int, int] | None = None  # --removals: (uncredited commands, how many were removed)
    in_sufficient_set: list[bool | None] | None = None  # (e) per command; None: the object has no sufficient set


def read_counterfactuals(path: Path) -> list[Counterfactual]:
    """The objects of one `depgpo counterfactual --format json` output (one a line, or one JSON document), with
    their kept replays. Raises BadInput naming the file, line, field and fix."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        documents = document if isinstance(document, list) else [document]
    except json.JSONDecodeError:  # several lines, as the CLI prints them
        documents = read_jsonl(path)
    return [_counterfactual(f"{path} line {number}", path, document)
            for number, document in enumerate(documents, start=1)]


def _counterfactual(where: str, path: Path, document) -> Counterfactual:
    def bad(field: str, problem: str) -> BadInput:
        return BadInput(f"{where}: {field}: {problem}; {FIX}")

    if not isinstance(document, dict):
        raise bad("(object)", f"expected a counterfactual object, got {type(document).__name__}")
    if not isinstance(document.get("task"), str):
        raise bad("task", "missing or not a string")
    reward = document.get("reward", "absent")
    if reward is not None and not _number(reward):
        raise bad("reward", f"expected a number or null, got {reward!r}")
    if not isinstance(document.get("reproducible"), bool):
        raise bad("reproducible", "missing or not true/false")
    commands = document.get("commands")
    if not isinstance(commands, list) or not commands:
        raise bad("commands", "missing, empty or not a list")
    for k, command in enumerate(commands):
        removed = not isinstance(command, dict) or command.get("weight", 1.0) != 0  # weight 0: not removed (--removals)
        for field, check in (("index", _integer), ("turn", _integer), ("weight", lambda v: _number(v) and v >= 0),
                             ("necessary", _boolean if removed else lambda v: v is None),
                             ("reward_without", lambda v: v is None or _number(v))):
            if not isinstance(command, dict) or not check(command.get(field, 1.0 if field == "weight" else ...)):
                value = command.get(field, "absent") if isinstance(command, dict) else command
                raise bad(f"commands[{k}].{field}", f"missing or of the wrong type ({value!r})")
    kept = document.get("trajectory")
    if not isinstance(kept, str):
        raise bad("trajectory", "null or missing: the scores need the kept replay (a), written only with --out")
    trajectory_path = _resolve(Path(kept), path)
    if trajectory_path is None:
        raise bad("trajectory", f"{kept} does not exist (a relative path is read from {path.parent}, then from "
                                "the working directory)")
    try:
        trajectory = json.loads(trajectory_path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise bad("trajectory", f"{trajectory_path} is not a readable trajectory.json ({error})") from error
    if not isinstance(trajectory, dict) or len(trajectory.get("commands") or []) != len(commands):
        raise bad("trajectory", f"{trajectory_path} does not hold the replay's {len(commands)} commands")
    group = document.get("gigpo_group")
    if group is not None and not _is_group(group):
        raise bad("gigpo_group", "expected null or {\"anchor_keys\": [[str, ...] per member], \"rewards\": "
                                 "[number per member], \"member\": index}")
    sample = document.get("removal_sample")
    if sample is not None and not (isinstance(sample, dict) and _integer(sample.get("others"))
                                   and _integer(sample.get("drawn")) and 0 < sample["drawn"] <= sample["others"]):
        raise bad("removal_sample", "expected null or {\"others\": N, \"drawn\": K} with 0 < K <= N")
    return Counterfactual(where, document["task"], float(reward or 0.0), document["reproducible"], commands,
                          trajectory, group, None if sample is None else (sample["others"], sample["drawn"]),
                          _sufficient_set(document, bad))


def _sufficient_set(document: dict, bad) -> list[bool | None] | None:
    """Each command's (e) label, or None for an object without a sufficient set (a failure, or written before
    (e) existed)."""
    found = document.get("sufficient_set")
    if found is None:
        return None
    if not (isinstance(found, dict) and isinstance(found.get("kept"), list) and all(map(_integer, found["kept"]))
            and isinstance(found.get("complete"), bool)):
        raise bad("sufficient_set", "expected null or {\"kept\": [index, ...], \"complete\": true/false, "
                                    "\"replays\": N}")
    if not (document.get("reward") or 0) > 0:
        raise bad("sufficient_set", "a failure (reward 0) has none: every subset earns 0; set it to null")
    labels = [command.get("in_sufficient_set", "absent") for command in document["commands"]]
    for k, label in enumerate(labels):
        if label is not None and not isinstance(label, bool):
            raise bad(f"commands[{k}].in_sufficient_set", f"expected true, false or null, got {label!r}")
    if sorted(k for k, label in enumerate(labels) if label) != sorted(set(found["kept"]) & {
            k for k, label in enumerate(labels) if label is not None}):
        raise bad("sufficient_set.kept", "does not match the commands' in_sufficient_set (true exactly for the "
                                         "decided commands it keeps)")
    return labels


def _is_group(group) -> bool:
    if not isinstance(group, dict):
        return False
    anchors, rewards, member = group.get("anchor_keys"), group.get("rewards"), group.get("member")
    return (isinstance(anchors, list) and all(isinstance(a, list) and all(isinstance(k, str) for k in a)
                                              for a in anchors)
            and isinstance(rewards, list) and len(rewards) == len(anchors) and all(map(_number, rewards))
            and _integer(member) and member < len(anchors))


def _resolve(kept: Path, source: Path) -> Path | None:
    for candidate in ([kept] if kept.is_absolute() else [source.parent / kept, kept]):
        if candidate.is_file():
            return candidate
    return None


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _boolean(value) -> bool:
    return isinstance(value, bool)
