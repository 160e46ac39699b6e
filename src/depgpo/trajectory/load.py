"""Reading a trajectory: typed field access that names the bad field, and the header every reader checks.

Readers (credit, the reports, the trainer's logs) get a field through `field` or `items`, which raise
`TrajectoryError` with the field's dotted name (`commands[3].writes[0].path: missing`), so that a hand-edited or
foreign record fails with a message that says where and what, and nothing downstream sees a wrong type.
"""

from __future__ import annotations

import math
from typing import Any

from depgpo.trajectory.schema import READABLE_VERSIONS


class TrajectoryError(ValueError):
    """The trajectory lacks a field a reader needs, or holds one of the wrong type; `field` names it."""

    def __init__(self, field_name: str, problem: str):
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name


_REQUIRED = object()
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", list: "a list", dict: "an object"}


def field(mapping: dict, key: str, kind: type, where: str, default: Any = _REQUIRED) -> Any:
    """`mapping[key]` checked against `kind`; a null or absent optional field gives `default`."""
    name = f"{where}.{key}" if where else key
    value = mapping.get(key)
    if value is None:
        if default is _REQUIRED:
            raise TrajectoryError(name, "missing" if key not in mapping else "is null")
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TrajectoryError(name, f"expected {_TYPE_NAMES[kind]}, got {type(value).__name__}")
    return value


def items(mapping: dict, key: str, kind: type, where: str) -> list:
    """An optional list field whose items must all be of `kind`."""
    values = field(mapping, key, list, where, [])
    for position, value in enumerate(values):
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TrajectoryError(f"{where}.{key}[{position}]", f"expected {_TYPE_NAMES[kind]}, "
                                                                 f"got {type(value).__name__}")
    return values


def check_header(trajectory: dict) -> None:
    """The fields every reader of a trajectory relies on: a known `schema_version` (when the record has one, as
    every trajectory.json does) and a numeric or null `verifier.reward`; raises TrajectoryError saying the fix."""
    if "schema_version" in trajectory:
        version = trajectory["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
            known = ", ".join(map(str, READABLE_VERSIONS))
            raise TrajectoryError("schema_version", f"unknown version {version!r}; this depgpo reads version {known} "
                                  "(docs/trajectory-schema.md): re-record it with `depgpo run-episode`, or convert it")
    verifier = trajectory.get("verifier")
    reward = verifier.get("reward") if isinstance(verifier, dict) else None
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))
                               or not math.isfinite(reward)):
        raise TrajectoryError("verifier.reward", f"expected a number or null, got {reward!r}; write the verifier's "
                              "reward in [0, 1] (e.g. \"reward\": 1.0), or null when it is unknown")
