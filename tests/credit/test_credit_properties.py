"""Properties of the credit that must hold for every trajectory: factors, monotonicity in β, ablations that change
only what they name, and never raising into the trainer on random or malformed input."""

from __future__ import annotations

import math
import posixpath
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depgpo.credit import CreditConfig, compute_credit, credit_with_fallback, step_factors_for
from depgpo.credit.factors import EQUAL_CREDIT, NO_POSITIVE_TURN

PATHS = ["/app/a.txt", "/app/b.py", "/app/out.csv", "/app/answer.txt", "/app/sub/c.txt", "/usr/lib/x.so",
         "/app/__pycache__/c.pyc", "/tmp/t.log"]
LINES = ["alpha_1", "beta_2", "x = 1", "63841", "", "END", "0.875"]
WORDS = ["63841", "0.875", "alpha_1", "run.sh", "/app/a.txt", "word", "fooBar", "12", "cat", "echo"]
PORTS = ["tcp:8080", "tcp:5000"]
NAMES = ["python3", "nginx"]
RECORDS = PATHS + PORTS + [f"proc:{name}" for name in NAMES]

def examples(count: int) -> settings:
    return settings(max_examples=count, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def random_trajectory(rng: random.Random) -> dict:
    """A well-formed trajectory over a small universe of records, so that edges of every kind occur. (Built from a
    seed: drawing each field through hypothesis costs ~100 ms per trajectory, too slow for 10,000 examples.)"""

    def words() -> str:
        return " ".join(rng.choices(WORDS, k=rng.randint(0, 4)))

    def some(pool: list, most: int) -> list:
        return rng.choices(pool, k=rng.randint(0, most))

    def file_write() -> dict:
        content = some(LINES, 4)
        return {"path": rng.choice(PATHS), "text": rng.random() < 0.7,
                "lines_written": rng.choices(content, k=rng.randint(0, 3)) if content else [],
                "content_after": content, "hash_after": rng.choice(["sha256:1", "sha256:2", "dir"])}

    commands, turn = [], 0
    for index in range(rng.randint(0, 8)):
        turn += rng.randint(0, 2)
        commands.append({
            "index": index, "turn": turn, "text": words(), "observation": words(),
            "reads": some(PATHS, 2), "stats": some(PATHS, 1), "writes": [file_write() for _ in range(rng.randint(0, 2))],
            "deletions": some(PATHS, 1), "ports_bound": some(PORTS, 1), "ports_connected": some(PORTS, 1),
            "processes_started": [{"pid": rng.randint(1, 3), "name": rng.choice(NAMES), "alive_after": rng.random() < 0.7}
                                  for _ in range(rng.randint(0, 1))],
            "processes_killed": [{"pid": rng.randint(1, 3)} for _ in range(rng.randint(0, 1))],
            "processes_probed": [{"owner": rng.randrange(index)} for _ in range(rng.randint(0, 1))] if index else [],
        })
    trajectory = {
        "instruction": words(), "workdir": "/app", "commands": commands,
        "verifier": {"E": some(RECORDS, 4), "E_source": rng.choice(["trace", "static"])},
    }
    owners = range(max(len(commands), 1))
    if rng.random() < 0.5:
        trajectory["final"] = {
            "files": {path: {"exists": rng.random() < 0.7, "lines": some(LINES, 4) if rng.random() < 0.8 else None,
                             "hash": rng.choice(["sha256:1", "sha256:2"])} for path in some(PATHS, 4)},
            "alive_processes": [{"pid": rng.randint(1, 3), "name": rng.choice(NAMES), "owner": rng.choice(owners)}
                                for _ in range(rng.randint(0, 2))],
            "listening_ports": [{"port": rng.choice(PORTS), "owner": rng.choice(owners)}
                                for _ in range(rng.randint(0, 2))],
        }
    return trajectory


# One seed per example: a hypothesis-driven Random draws every call through hypothesis, ~20 ms per trajectory.
seeds = st.integers(0, 2**32 - 1)
trajectories = st.builds(lambda seed: random_trajectory(random.Random(seed)), seeds)
configs = st.builds(CreditConfig, beta=st.floats(0, 1), indirect_decay=st.floats(0, 1),
                    factor_floor=st.floats(0, 2), factor_scale=st.sampled_from(["range", "max"]))


@examples(1500)
@given(trajectories, configs, st.integers(0, 3))
def test_factors_are_non_negative_with_mean_one_or_unit_with_a_reason(trajectory, config, extra_turns):
    turns = max((command["turn"] + 1 for command in trajectory["commands"]), default=0) + extra_turns
    result = compute_credit(trajectory, config, num_turns=turns)
    assert len(result.step_factors) == turns
    assert all(factor >= 0 for factor in result.step_factors)
    if turns:
        assert abs(math.fsum(result.step_factors) / turns - 1.0) <= 1e-9
    for entry in result.commands:
        assert 0 <= entry.q <= 1 and entry.q == max(entry.direct, entry.indirect, entry.info)
    if result.commands and max(result.turn_credit) - min(result.turn_credit) <= 1e-9:
        assert result.step_factors == [1.0] * turns
        assert result.fallback in (NO_POSITIVE_TURN, EQUAL_CREDIT)
    if result.fallback is not None:
        assert result.step_factors == [1.0] * turns


@examples(800)
@given(trajectories, st.floats(0, 1), st.floats(0, 1))
def test_raising_beta_never_lowers_any_credit(trajectory, beta_a, beta_b):
    low, high = sorted((beta_a, beta_b))
    below = compute_credit(trajectory, CreditConfig(beta=low)).commands
    above = compute_credit(trajectory, CreditConfig(beta=high)).commands
    for weaker, stronger in zip(below, above, strict=True):
        assert stronger.info >= weaker.info and stronger.q >= weaker.q


def _by(trajectory: dict, variant: str, **config) -> list:
    return compute_credit(trajectory, CreditConfig(variant=variant, **config)).commands


@examples(800)
@given(trajectories)
def test_each_ablation_changes_only_what_it_names(trajectory):
    full = _by(trajectory, "full")
    no_read = _by(trajectory, "no_read_credit")
    assert [(c.direct, c.indirect) for c in no_read] == [(c.direct, c.indirect) for c in full]
    assert all(c.info == 0 and c.q == max(c.direct, c.indirect) for c in no_read)

    direct_only = _by(trajectory, "direct_only")
    assert [c.direct for c in direct_only] == [c.direct for c in full]
    assert all(c.indirect == 0 for c in direct_only)
    assert [c.q for c in direct_only] == [c.q for c in _by(trajectory, "full", indirect_decay=0.0)]

    binary = _by(trajectory, "binary_write")
    assert [c.direct for c in binary] == [1.0 if c.direct > 0 else 0.0 for c in full]

    unfiltered = credit_with_fallback(trajectory, CreditConfig(variant="no_verifier_filter"))
    written = {write["path"] for command in trajectory["commands"] for write in command["writes"]}
    written |= {port for command in trajectory["commands"] for port in command["ports_bound"]}
    written |= {f"proc:{process['name']}" for command in trajectory["commands"]
                for process in command["processes_started"]}
    if unfiltered.commands:
        assert set(unfiltered.verifier_records) <= written
        # The same run with that E given as the verifier's; the original E's directories stay in the tracked scope.
        scope = ["/app"] + [posixpath.dirname(record) for record in trajectory["verifier"]["E"] if "/" in record]
        with_that_e = {**trajectory, "tracked_roots": scope,
                       "verifier": {"E": unfiltered.verifier_records, "E_source": "trace"}}
        assert unfiltered.commands == compute_credit(with_that_e).commands


# ---- never raising into the trainer -----------------------------------------------------------------------------

SCHEMA_KEYS = ["commands", "verifier", "final", "instruction", "workdir", "tracked_roots", "E", "E_source", "turn",
               "text", "observation", "reads", "stats", "writes", "path", "text", "lines_written", "content_after",
               "deletions", "ports_bound", "ports_connected", "processes_started", "processes_probed", "owner", "pid",
               "files", "exists", "lines", "alive_processes", "listening_ports", "port", "name", "alive_after"]


def random_garbage(rng: random.Random, depth: int = 3):
    """Any JSON-like value: often an object with schema keys, at any depth."""
    kind = rng.randrange(9 if depth else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 7, 2**63, -(10**12), rng.randint(-100, 100)])
    if kind == 3:
        return rng.choice([0.5, -0.0, float("nan"), float("inf"), 1e300])
    if kind in (4, 5):
        return rng.choice(["", "x", "/app/a.txt", "tcp:8080", "proc:", "\x00", "63841", "ünï", "{}"])
    if kind == 6:
        return [random_garbage(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(SCHEMA_KEYS) if rng.random() < 0.8 else "junk": random_garbage(rng, depth - 1)
            for _ in range(rng.randint(0, 4))}


def mutate(trajectory: dict, rng: random.Random) -> dict:
    """The trajectory with a few fields deleted or replaced by garbage, at any depth."""
    for _ in range(rng.randint(1, 3)):
        node = trajectory
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = rng.choice(keys)
            if isinstance(node[key], dict | list) and node[key] and rng.random() < 0.6:
                node = node[key]
                continue
            if isinstance(node, dict) and rng.random() < 0.5:
                del node[key]
            else:
                node[key] = random_garbage(rng)
            break
    return trajectory


def random_num_turns(rng: random.Random):
    """Mostly absent (turns from the commands), else a count that may be too small, or not a count at all."""
    return None if rng.random() < 0.6 else rng.choice([0, 1, 3, 12, -1, 10**12, True, 2.0, "3", float("nan")])


def _assert_safe(trajectory, num_turns) -> None:
    try:
        factors, reason = step_factors_for(trajectory, CreditConfig(), num_turns)
    except ValueError as error:  # only where the number of factors is unknown: a bad count, or none and no trajectory
        assert "num_turns" in str(error) and "\n" not in str(error)
        fallback = credit_with_fallback(trajectory, CreditConfig(), num_turns)  # the agent loop's: never raises
        assert num_turns is not None or fallback.step_factors == []
        return
    assert isinstance(factors, list) and all(isinstance(factor, float) for factor in factors)
    if reason is None:
        assert abs(math.fsum(factors) / len(factors) - 1.0) <= 1e-9
    else:
        assert isinstance(reason, str) and reason and factors == [1.0] * len(factors)


@examples(4000)
@given(seeds)
def test_garbage_never_raises(seed):
    rng = random.Random(seed)
    _assert_safe(random_garbage(rng), random_num_turns(rng))


@examples(6000)
@given(seeds)
def test_malformed_trajectories_never_raise(seed):
    rng = random.Random(seed)
    _assert_safe(mutate(random_trajectory(rng), rng), random_num_turns(rng))
