"""Read a results tree (`results/{scale}`, docs/pipeline.md) into pandas frames for the tables and figures.

Settings (`{model}/{data}`) and runs are discovered by globbing, so the report works on whatever subset of the
pipeline has been run; what a table or figure needs but cannot find is raised as `MissingInput`, whose message
names the file and the stage that writes it. An input that is there but malformed (not JSON, a trajectory with an
unknown `schema_version` or a non-numeric reward) is raised as `BadInput`, whose one-line message names the file,
the line or entry, the field and the fix.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from depgpo.numerics import NUMERICS_FILE

# The Snakemake rule (workflow/rules) and stage command that write each kind of input, for the messages about
# missing files.
PRODUCERS = {
    "eval": "rule `evaluate` (`depgpo evaluate`)",
    "rl": "rule `rl_{run}` (`depgpo rl`)",
    "filter": "rule `filter` (`depgpo filter`)",
    "reference": "rule `sft_data` (`depgpo sft-data --reference`)",
    "counterfactual": "rule `counterfactual` (`depgpo counterfactual-sample`)",
}
STAGE_DIRS = ("sft", "filter", "rl", "eval")

# The state a turn acted on after a turn that ran no command (an unparseable reply): one shared placeholder, as
# the agent loop shows every such turn the same message, so anchors compare equal exactly when the loop's do.
NO_COMMAND_OBSERVATION = "<no command in the previous turn>"


class BadInput(ValueError):
    """An input file is there but cannot be used as it is."""


class MissingInput(Exception):
    """An input a table or figure needs is absent."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"missing {path} (written by {PRODUCERS[kind]})")


@dataclass(frozen=True, order=True)
class Setting:
    """One model x data combination: a column group of Table 1."""

    model: str
    data: str

    @property
    def label(self) -> str:
        return f"{self.model} / {self.data}"

    @property
    def path(self) -> str:
        return f"{self.model}/{self.data}"


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise BadInput(f"{path} line {number}: not JSON ({error}); expected one JSON object per line")
    return rows


def read_trajectories(path: Path) -> list[dict]:
    """The logged rollouts of one update file (trajectory.json records, one a line), their headers checked."""
    from depgpo.trajectory import TrajectoryError, check_header

    trajectories = read_jsonl(path)
    for number, trajectory in enumerate(trajectories, start=1):
        if not isinstance(trajectory, dict):
            raise BadInput(f"{path} line {number}: expected a trajectory object, got {type(trajectory).__name__}")
        try:
            check_header(trajectory)
        except TrajectoryError as error:
            raise BadInput(f"{path} line {number}: {error}") from error
    return trajectories


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def seed_of(seed_dir: Path) -> int:
    return int(seed_dir.name.removeprefix("seed"))


class ResultsTree:
    """Lazy, cached views of one `results/{scale}` directory."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @cached_property
    def settings(self) -> list[Setting]:
        """Every `{model}/{data}` directory that holds at least one stage's output, sorted."""
        found = {Setting(stage_dir.parent.parent.name, stage_dir.parent.name)
                 for stage in STAGE_DIRS for stage_dir in self.root.glob(f"*/*/{stage}") if stage_dir.is_dir()}
        return sorted(found)

    # ------------------------------------------------------------------ evaluation
    @cached_property
    def _evaluations(self) -> list[tuple[dict, dict]]:
        """(keys, eval JSON) of every `{model}/{data}/eval/{run}/seed{seed}/{test}.json`."""
        evaluations = []
        for path in sorted(self.root.glob("*/*/eval/*/seed*/*.json")):
            if path.name == NUMERICS_FILE:  # what produced them, beside the results (depgpo.numerics)
                continue
            seed_dir = path.parent
            run_dir = seed_dir.parent
            keys = {"model": run_dir.parents[2].name, "data": run_dir.parents[1].name, "run": run_dir.name,
                    "seed": seed_of(seed_dir), "test": path.stem}
            evaluations.append((keys, json.loads(path.read_text())))
        return evaluations

    @cached_property
    def eval_rounds(self) -> pd.DataFrame:
        """One row per evaluation round: model, data, run, seed, test, round, pass_at_1 (%)."""
        rows = [{**keys, "round": index, "pass_at_1": float(value)}
                for keys, result in self._evaluations for index, value in enumerate(result["pass_at_1"])]
        return pd.DataFrame(rows, columns=["model", "data", "run", "seed", "test", "round", "pass_at_1"])

    @cached_property
    def eval_tasks(self) -> pd.DataFrame:
        """One row per task attempt: model, data, run, seed, test, round, task, success (0/1)."""
        rows = [{**keys, "round": entry["round"], "task": task, "success": int(success)}
                for keys, result in self._evaluations for entry in result["rounds"]
                for task, success in entry["tasks"].items()]
        return pd.DataFrame(rows, columns=["model", "data", "run", "seed", "test", "round", "task", "success"])

    # ------------------------------------------------------------------ RL runs
    @cached_property
    def metrics(self) -> pd.DataFrame:
        """Every RL update: model, data, run, seed, then the metrics.jsonl keys (NaN where a run lacks one)."""
        frames = []
        for path in sorted(self.root.glob("*/*/rl/*/seed*/metrics.jsonl")):
            run_dir = path.parent.parent
            frame = pd.DataFrame(read_jsonl(path))
            frame.insert(0, "seed", seed_of(path.parent))
            frame.insert(0, "run", run_dir.name)
            frame.insert(0, "data", run_dir.parents[1].name)
            frame.insert(0, "model", run_dir.parents[2].name)
            frames.append(frame)
        if not frames:
            return pd.DataFrame(columns=["model", "data", "run", "seed", "update"])
        return pd.concat(frames, ignore_index=True)

    def run_metrics(self, setting: Setting, run: str, keys: tuple[str, ...] = ()) -> pd.DataFrame:
        """The metrics of one run (all seeds); raises MissingInput when it has none, or lacks one of `keys`."""
        metrics = self.metrics
        selected = metrics[(metrics.model == setting.model) & (metrics.data == setting.data) & (metrics.run == run)]
        path = f"{setting.path}/rl/{run}/seed*/metrics.jsonl"
        if selected.empty:
            raise MissingInput(path, "rl")
        absent = [key for key in keys if key not in selected or selected[key].isna().all()]
        if absent:
            raise MissingInput(f"{path} with the keys {', '.join(absent)}", "rl")
        return selected

    def trajectory_files(self, setting: Setting, run: str) -> list[Path]:
        files = sorted(self.root.glob(f"{setting.path}/rl/{run}/seed*/trajectories/update*.jsonl"))
        if not files:
            raise MissingInput(f"{setting.path}/rl/{run}/seed*/trajectories/update*.jsonl", "rl")
        return files

    def trajectories_per_update(self, setting: Setting, run: str) -> pd.DataFrame:
        """seed, update, trajectories: the number of rollouts logged per update (lines counted, not parsed)."""
        rows = []
        for path in self.trajectory_files(setting, run):
            with open(path, "rb") as raw:
                count = sum(1 for line in raw if line.strip())
            rows.append({"seed": seed_of(path.parent.parent), "update": int(path.stem.removeprefix("update")),
                         "trajectories": count})
        return pd.DataFrame(rows)

    def anchor_recurrence(self, setting: Setting, run: str) -> tuple[pd.DataFrame, bool]:
        """For every turn of every logged rollout: (turn, recurs), where `recurs` says that the turn's anchor state
        also occurs in another trajectory of the same group; and whether the anchors had to be reconstructed.

        A group is the rollouts of one task in one update file (two draws of the same task in one update merge).
        """
        rows, reconstructed = [], False
        for path in self.trajectory_files(setting, run):
            groups: dict[str, list[list[str]]] = defaultdict(list)
            for trajectory in read_trajectories(path):
                anchors = trajectory.get("anchor_keys")
                if anchors is None:
                    anchors, reconstructed = turn_anchors(trajectory), True
                groups[trajectory["task"]["id"]].append(anchors)
            for trajectories in groups.values():
                owners: dict[str, set[int]] = defaultdict(set)
                for index, anchors in enumerate(trajectories):
                    for anchor in anchors:
                        owners[anchor].add(index)
                rows += [{"turn": turn, "recurs": len(owners[anchor] - {index}) > 0}
                         for index, anchors in enumerate(trajectories) for turn, anchor in enumerate(anchors)]
        return pd.DataFrame(rows, columns=["turn", "recurs"]), reconstructed

    # ------------------------------------------------------------------ filter and SFT reference
    def filter_summary(self, setting: Setting) -> dict:
        path = self.root / setting.path / "filter" / "filter.json"
        if not path.is_file():
            raise MissingInput(f"{setting.path}/filter/filter.json", "filter")
        return json.loads(path.read_text())

    def reference_credit(self, setting: Setting) -> pd.DataFrame:
        """task, commands, connected_fraction, reward of every reference (oracle) trajectory."""
        path = self.root / setting.path / "sft" / "reference_credit.json"
        if not path.is_file():
            raise MissingInput(f"{setting.path}/sft/reference_credit.json", "reference")
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))["trajectories"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
            raise BadInput(f"{path}: not a reference credit file ({type(error).__name__}: {error}); expected "
                           f"{{\"trajectories\": [...]}} as `depgpo sft-data --reference` writes it") from error
        for position, row in enumerate(rows):
            for key in ("commands", "connected_fraction", "reward"):
                value = row.get(key) if isinstance(row, dict) else None
                if not _is_number(value):
                    raise BadInput(f"{path}: trajectories[{position}].{key}: expected a number, got {value!r}; "
                                   "rewrite the file with `depgpo sft-data --reference`")
        return pd.DataFrame(rows, columns=["task", "commands", "connected_fraction", "reward"])


def turn_anchors(trajectory: dict) -> list[str]:
    """GiGPO's anchor state of every turn, as the agent loop defines it (depgpo.agent.loop): the instruction for
    turn 0, then the observation of the previous turn's command."""
    observation_after = {command["turn"]: command["observation"] for command in trajectory["commands"]}
    return [trajectory["instruction"]] + [observation_after.get(turn - 1, NO_COMMAND_OBSERVATION)
                                          for turn in range(1, trajectory["num_turns"])]
