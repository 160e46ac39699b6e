"""The trajectory contract: the documented fields are the typed ones, and what the producers write conforms."""

from __future__ import annotations

import re
import shutil
import typing

import pytest

from depgpo.env.cli import oracle_commands
from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.inference import infer_trajectory, load_trajectories
from depgpo.tasks import load_task
from depgpo.trajectory import schema
from tests.helpers import DATA, REPO

DOC = REPO / "docs" / "trajectory-schema.md"
FIXTURE_TASKS = DATA / "tasks"


def typed_dicts() -> list[type]:
    return [value for value in vars(schema).values() if typing.is_typeddict(value)]


def declared_keys(typed: type) -> set[str]:
    return set(typed.__required_keys__) | set(typed.__optional_keys__)


def test_the_document_lists_exactly_the_typed_fields():
    block = DOC.read_text().split("```jsonc", 1)[1].split("```", 1)[0]
    block = re.sub(r'"tests": \{[^}]*\}', '"tests": {}', block)  # a map: its keys are test names, not fields
    documented = {key for key in re.findall(r'"([^"/]+)"\s*:', block)}
    declared = set().union(*map(declared_keys, typed_dicts()))
    assert documented - declared == set(), "documented in docs/trajectory-schema.md, not in trajectory.schema"
    assert declared - documented == set(), "in trajectory.schema, missing from docs/trajectory-schema.md"


def conformance_errors(value, hint, where: str = "") -> list[str]:
    """Keys a producer wrote that the schema does not declare, and required keys it left out (recursively)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: expected an object"]
        hints = typing.get_type_hints(hint)
        errors = [f"{where}.{key}: not in the schema" for key in value if key not in hints]
        errors += [f"{where}.{key}: missing" for key in hint.__required_keys__ if key not in value]
        for key, sub in value.items():
            if key in hints:
                errors += conformance_errors(sub, hints[key], f"{where}.{key}")
        return errors
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        options = [a for a in args if a is not type(None)]
        return [] if value is None else conformance_errors(value, options[0], where) if len(options) == 1 else []
    if origin is typing.NotRequired:
        return conformance_errors(value, args[0], where)
    if origin is list and isinstance(value, list):
        return [e for i, item in enumerate(value) for e in conformance_errors(item, args[0], f"{where}[{i}]")]
    if origin is dict and isinstance(value, dict):
        return [e for key, item in value.items() for e in conformance_errors(item, args[1], f"{where}[{key!r}]")]
    return []


@pytest.mark.sandbox
def test_a_traced_episode_writes_the_declared_fields(tmp_path):
    task = load_task(shutil.copytree(FIXTURE_TASKS / "write-answer", tmp_path / "task"))
    with Episode(task, EpisodeConfig(command_timeout_s=20), out_dir=tmp_path / "out") as episode:
        for turn, command in enumerate(oracle_commands(task)):
            episode.run_command(command, turn=turn)
        episode.verify()
    [trajectory] = load_trajectories(tmp_path / "out" / "trajectory.json")
    assert trajectory["verifier"]["reward"] == 1.0
    assert conformance_errors(trajectory, schema.Trajectory) == []


def test_an_inferred_trajectory_writes_the_declared_fields():
    trajectory = infer_trajectory([{"text": "cd /app && printf 'a\\nb\\n' > out.txt"}, {"text": "cat out.txt"}],
                                  instruction="Write /app/out.txt", num_turns=3)
    assert trajectory["schema_version"] == schema.SCHEMA_VERSION and trajectory["source"] == "static"
    assert conformance_errors(trajectory, schema.Trajectory) == []


def test_the_reader_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "trajectory.json"
    path.write_text('{"schema_version": 7, "commands": []}')
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: schema_version: unknown version 7"):
        load_trajectories(path)
    path.write_text("{")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: not JSON"):
        load_trajectories(path)
