"""The credit definition of docs/credit.md, rule by rule, and the paper's examples (docs/credit.md#worked-examples)."""

from __future__ import annotations

import math

import pytest

import depgpo.credit
from depgpo.credit import CreditConfig, TrajectoryError, aggregate_diagnostics, compute_credit, step_factors_for
from depgpo.credit.salience import salient_tokens
from tests.helpers.credit_examples import (
    BN_FIT_MODIFY,
    CONSTRAINTS_SCHEDULING,
    COUNT_DATASET_TOKENS,
    EXAMPLES,
    binary_write,
    command,
    text_write,
)


def episode(commands: list[dict], verifier_records: list[str], final: dict | None = None, **fields) -> dict:
    """A minimal trajectory; without `final` the credit replays the final state from the commands."""
    trajectory = {"instruction": "", "workdir": "/app", "commands": commands,
                  "verifier": {"E": verifier_records, "E_source": "trace"}, **fields}
    if final is not None:
        trajectory["final"] = final
    return trajectory


def credits(trajectory: dict, **config) -> list[float]:
    return [entry.q for entry in compute_credit(trajectory, CreditConfig(**config)).commands]


def write(turn: int, path: str, lines: list[str], content: list[str] | None = None, **kwargs) -> dict:
    return command(turn, f"write {path}", writes=(text_write(path, lines, content or lines),), **kwargs)


# ---- docs/credit.md#worked-examples ------------------------------------------------------------------------------------

@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.name)
def test_paper_examples_come_out_exactly(example):
    result = compute_credit(example.trajectory, CreditConfig(beta=0.5), num_turns=example.num_turns)
    assert {entry.turn: (entry.role, entry.q) for entry in result.commands} == example.expected
    assert result.fallback is None
    assert math.fsum(result.step_factors) == pytest.approx(example.num_turns)


def test_supporting_read_example_step_factors():
    result = compute_credit(COUNT_DATASET_TOKENS.trajectory, num_turns=20)
    # q_17 = 0.5, q_18 = 1, other turns 0: q̃ = q, mean 1.5 / 20.
    assert result.step_factors[17] == pytest.approx(0.5 / 0.075)
    assert result.step_factors[18] == pytest.approx(1.0 / 0.075)
    assert result.information_edges == [(0, 1)]


def test_indirect_example_edges():
    result = compute_credit(BN_FIT_MODIFY.trajectory)
    assert result.dependency_edges == [(1, 2)]  # t4 ran the script t3 wrote; the R install left nothing tracked
    assert result.commands[1].direct == 0.0 and result.commands[1].indirect == 1.0


# ---- docs/credit.md#survival, #direct-contribution -----------------------------------------------------------------------

def test_line_survival_is_a_multiset_content_match():
    trajectory = episode([write(0, "/app/x", ["a", "a", "b"])], ["/app/x"],
                         final={"files": {"/app/x": {"exists": True, "lines": ["b", "a", "c"]}}})
    assert credits(trajectory) == [pytest.approx(2 / 3)]


def test_direct_weights_records_by_lines_written():
    trajectory = episode([
        command(0, "gen", writes=(text_write("/app/a", ["1", "2", "3"], ["1", "2", "3"]),
                                  text_write("/app/b", ["old"], ["old"]))),
        write(1, "/app/b", ["new"]),
    ], ["/app/a", "/app/b"])
    assert credits(trajectory) == [pytest.approx(3 / 4), 1.0]


def test_record_level_survival_is_last_writer_or_same_hash():
    trajectory = episode([
        command(0, "cp v1 out.bin", writes=(binary_write("/app/out.bin", "aa"),)),
        command(1, "cp v2 out.bin", writes=(binary_write("/app/out.bin", "bb"),)),
        command(2, "cp v1 out.bin", writes=(binary_write("/app/out.bin", "aa"),)),
    ], ["/app/out.bin"], final={"files": {"/app/out.bin": {"exists": True, "hash": "sha256:aa", "lines": None}}})
    assert credits(trajectory) == [1.0, 0.0, 1.0]


def test_a_write_without_lines_is_scored_at_record_level():
    touch = {"path": "/app/done", "created": True, "text": True, "lines_written": [], "content_after": [],
             "hash_after": "sha256:e3"}
    assert credits(episode([command(0, "touch /app/done", writes=(touch,))], ["/app/done"])) == [1.0]


def test_deletion_is_credited_only_when_the_verified_path_stays_absent():
    created = write(0, "/app/stale.lock", ["pid 7"])
    removed = command(1, "rm /app/stale.lock", deletions=("/app/stale.lock",))
    assert credits(episode([created, removed], ["/app/stale.lock"])) == [0.0, 1.0]
    recreated = write(2, "/app/stale.lock", ["pid 9"])
    assert credits(episode([created, removed, recreated], ["/app/stale.lock"])) == [0.0, 0.0, 1.0]
    assert credits(episode([created, removed], [])) == [0.0, 0.0]


def _server(turn: int, alive: bool) -> dict:
    entry = command(turn, "python3 -m http.server 8080 &")
    entry["ports_bound"] = ["tcp:8080"]
    entry["processes_started"] = [{"pid": 41, "name": "python3", "alive_after": alive}]
    return entry


def test_port_and_process_survive_while_the_server_is_up():
    up = {"files": {}, "alive_processes": [{"pid": 41, "name": "python3", "owner": 0}],
          "listening_ports": [{"port": "tcp:8080", "owner": 0}]}
    down = {"files": {}, "alive_processes": [], "listening_ports": []}
    for records in (["tcp:8080"], ["proc:python3"]):
        assert credits(episode([_server(0, True)], records, final=up)) == [1.0]
        assert credits(episode([_server(0, True)], records, final=down)) == [0.0]


def test_final_state_is_replayed_when_not_recorded():
    killer = command(1, "kill 41")
    killer["processes_killed"] = [{"pid": 41, "name": "python3", "owner": 0}]
    assert credits(episode([_server(0, True)], ["tcp:8080"])) == [1.0]
    assert credits(episode([_server(0, True), killer], ["tcp:8080"])) == [0.0, 0.0]
    without_final = {key: value for key, value in CONSTRAINTS_SCHEDULING.trajectory.items() if key != "final"}
    assert credits(without_final) == credits(CONSTRAINTS_SCHEDULING.trajectory)


# ---- docs/credit.md#indirect-contribution ------------------------------------------------------------------------------------

def test_connecting_to_a_port_reads_the_server_that_bound_it():
    client = command(1, "curl -s localhost:8080 > /app/index.html",
                     writes=(text_write("/app/index.html", ["<h1>ok</h1>"], ["<h1>ok</h1>"]),))
    client["ports_connected"] = ["tcp:8080"]
    result = compute_credit(episode([_server(0, True), client], ["/app/index.html"]))
    assert [(entry.role, entry.q) for entry in result.commands] == [("indirect write", 1.0), ("direct write", 1.0)]


def test_probing_a_process_reads_the_command_that_started_it():
    probe = command(1, "pgrep python3 > /app/pid.txt", writes=(text_write("/app/pid.txt", ["41"], ["41"]),))
    probe["processes_probed"] = [{"pid": 41, "name": "python3", "owner": 0}]
    assert credits(episode([_server(0, True), probe], ["/app/pid.txt"])) == [1.0, 1.0]


def test_a_version_that_no_longer_holds_the_lines_gives_no_edge():
    trajectory = episode([
        write(0, "/app/run.sh", ["echo one"]),
        write(1, "/app/run.sh", ["echo two"]),
        command(2, "bash run.sh > out", reads=("/app/run.sh",), writes=(text_write("/app/out", ["two"], ["two"]),)),
    ], ["/app/out"])
    assert credits(trajectory) == [0.0, 1.0, 1.0]


def test_an_edit_keeps_earlier_lines_in_the_version_a_later_write_reads():
    script = ["import sys", "print(1)", "sys.exit(0)"]
    edited = ["import sys", "print(2)", "sys.exit(0)"]
    trajectory = episode([
        write(0, "/app/solve.py", script),
        command(1, "sed -i s/1/2/ solve.py", reads=("/app/solve.py",),
                writes=(text_write("/app/solve.py", ["print(2)"], edited, created=False),)),
        command(2, "python3 solve.py > out", reads=("/app/solve.py",), writes=(text_write("/app/out", ["2"], ["2"]),)),
    ], ["/app/out"])
    assert credits(trajectory) == [1.0, 1.0, 1.0]


def test_a_deletion_is_no_source_of_indirect_credit():
    trajectory = episode([
        command(0, "rm -f /app/out", deletions=("/app/out",)),
        command(1, "test -e out || make", stats=("/app/out",), writes=(text_write("/app/out", ["x"], ["x"]),)),
    ], ["/app/out"])
    assert credits(trajectory) == [0.0, 1.0]


def test_indirect_decay_applies_per_hop():
    trajectory = episode([
        write(0, "/app/gen.py", ["print('x')"]),
        command(1, "python3 gen.py > mk.sh", reads=("/app/gen.py",),
                writes=(text_write("/app/mk.sh", ["x"], ["x"]),)),
        command(2, "bash mk.sh", reads=("/app/mk.sh",), writes=(text_write("/app/out", ["y"], ["y"]),)),
    ], ["/app/out"])
    assert credits(trajectory, indirect_decay=0.5) == [0.25, 0.5, 1.0]
    assert credits(trajectory) == [1.0, 1.0, 1.0]


# ---- docs/credit.md#tracked-scope ----------------------------------------------------------------------------------------------

def test_system_and_cache_locations_are_not_records():
    trajectory = episode([
        command(0, "pip install x", writes=(text_write("/usr/lib/python3/site.py", ["a"], ["a"]),
                                            text_write("/app/.venv/lib/site-packages/x.py", ["b"], ["b"]),
                                            text_write("/app/__pycache__/m.pyc", ["c"], ["c"]))),
    ], ["/app/out"], tracked_roots=["/"])
    result = compute_credit(trajectory)
    assert not result.commands[0].is_write
    assert result.commands[0].role == "no recorded dependency"


def test_directories_holding_a_verifier_record_are_tracked_over_exclusions():
    trajectory = episode([write(0, "/opt/svc/config.yaml", ["port: 80"])], ["/opt/svc/config.yaml"])
    assert credits(trajectory) == [1.0]


def test_globs_from_static_extraction_match_written_paths():
    trajectory = episode([write(0, "/app/out/a.csv", ["1,2"]), write(1, "/app/out/a.txt", ["x"])], ["/app/out/*.csv"])
    assert credits(trajectory) == [1.0, 0.0]


def test_tracked_roots_override():
    trajectory = episode([write(0, "/app/notes.md", ["n"]), write(1, "/srv/out", ["o"])], ["/srv/out"])
    assert [entry.is_write for entry in compute_credit(trajectory).commands] == [True, True]
    narrowed = compute_credit(trajectory, CreditConfig(tracked_roots=("/var/empty",))).commands
    assert [entry.is_write for entry in narrowed] == [False, True]  # /srv stays: it holds a verifier record


# ---- docs/credit.md#read-credit ---------------------------------------------------------------------------------------------------

def test_salient_tokens():
    text = ("x = 7, y = 3.5, count 63841, /app/a.txt, run.sh, meeting_id, fooBar, VERSION, word, abc1, "
            "DTSTART:20240115T090000Z, printf 'A\\nKEY_1'")
    assert salient_tokens(text, CreditConfig()) == {
        "3.5", "63841", "/app/a.txt", "run.sh", "meeting_id", "fooBar", "abc1", "20240115T090000Z", "KEY_1"}


def _answer(turn: int, value: str) -> dict:
    return command(turn, f"echo {value} > /app/answer.txt",
                   writes=(text_write("/app/answer.txt", [value], [value]),))


def test_read_credit_decays_by_beta_per_hop():
    trajectory = episode([
        command(0, "ls /app/data", observation="train_v2.csv\n", stats=("/app/data",)),
        command(1, "tail -1 train_v2.csv", observation="0.8731\n", reads=("/app/data/train_v2.csv",)),
        _answer(2, "0.8731"),
    ], ["/app/answer.txt"])
    assert credits(trajectory) == [0.25, 0.5, 1.0]
    assert credits(trajectory, beta=1.0) == [1.0, 1.0, 1.0]


def test_tokens_known_from_instruction_or_earlier_commands_are_not_revealed():
    shown = command(1, "python3 count.py", observation="63841\n")
    assert credits(episode([shown, _answer(2, "63841")], ["/app/answer.txt"],
                           instruction="The expected count is near 63841.")) == [0.0, 1.0]
    assert credits(episode([command(0, "echo 63841"), shown, _answer(2, "63841")], ["/app/answer.txt"])) \
        == [0.0, 0.0, 1.0]
    assert credits(episode([command(0, "echo 63841", observation="63841\n"), _answer(1, "63841")],
                           ["/app/answer.txt"])) == [0.0, 1.0]


def test_only_the_first_observation_reveals_a_token_unless_configured():
    trajectory = episode([
        command(0, "python3 count.py", observation="63841\n"),
        command(1, "python3 count.py --check", observation="63841\n"),
        _answer(2, "63841"),
    ], ["/app/answer.txt"])
    assert credits(trajectory) == [0.5, 0.0, 1.0]
    assert credits(trajectory, reveal_once=False) == [0.5, 0.5, 1.0]


def test_written_content_is_a_target_of_information_edges():
    solve = command(1, "python3 solve.py", writes=(text_write("/app/answer.txt", ["63841"], ["63841"]),))
    trajectory = episode([command(0, "wc -w data.txt", observation="63841 data.txt\n"), solve], ["/app/answer.txt"])
    assert credits(trajectory) == [0.5, 1.0]


# ---- docs/credit.md#ablations -------------------------------------------------------------------------------------------------------

def test_ablations_change_what_they_name():
    assert credits(COUNT_DATASET_TOKENS.trajectory, variant="no_read_credit") == [0.0, 1.0, 0.0]
    assert credits(BN_FIT_MODIFY.trajectory, variant="direct_only") == [0.0, 0.0, 1.0]
    partial = episode([write(0, "/app/x", ["a", "b"]), write(1, "/app/notes.txt", ["todo"])], ["/app/x"],
                      final={"files": {"/app/x": {"exists": True, "lines": ["a"]},
                                       "/app/notes.txt": {"exists": True, "lines": ["todo"]}}})
    assert credits(partial) == [0.5, 0.0]
    assert credits(partial, variant="binary_write") == [1.0, 0.0]
    assert credits(partial, variant="no_verifier_filter") == [0.5, 1.0]


def test_binary_write_reading_of_dc():
    deleted = CONSTRAINTS_SCHEDULING.trajectory
    assert credits(deleted, variant="binary_write")[0] == 0.0
    assert credits(deleted, variant="binary_write", binary_requires_survival=False)[0] == 1.0


# ---- docs/credit.md#step-factors, Table 4 fallbacks -------------------------------------------------------------------------

def _two_turns(first: float, second: float) -> dict:
    lines = ["a"] * 4
    final = ["a"] * round(4 * first) + ["z"]
    return episode([write(0, "/app/x", lines), write(1, "/app/y", ["b"])], ["/app/x", "/app/y"],
                   final={"files": {"/app/x": {"exists": True, "lines": final},
                                    "/app/y": {"exists": second > 0, "lines": ["b"] if second > 0 else None}}})


def test_step_factors_floor_and_scale():
    trajectory = _two_turns(0.5, 1.0)  # q = [0.5, 1]
    assert step_factors_for(trajectory) == ([0.0, 2.0], None)
    factors, _ = step_factors_for(trajectory, CreditConfig(factor_floor=1.0))
    assert factors == pytest.approx([2 / 3, 4 / 3])
    factors, _ = step_factors_for(trajectory, CreditConfig(factor_scale="max"))
    assert factors == pytest.approx([2 / 3, 4 / 3])


def test_turn_credit_is_the_max_over_its_commands_and_zero_without_commands():
    trajectory = _two_turns(0.5, 1.0)
    trajectory["commands"][1]["turn"] = 0
    result = compute_credit(trajectory, num_turns=3)
    assert result.turn_credit == [1.0, 0.0, 0.0]
    assert result.step_factors == pytest.approx([3.0, 0.0, 0.0])


@pytest.mark.parametrize(("trajectory", "config", "num_turns", "reason", "turns"), [
    (episode([], []), CreditConfig(), None, "no step information", 0),
    (_two_turns(0.5, 1.0), CreditConfig(enabled=False), None, "credit module off", 2),
    ({**_two_turns(0.5, 1.0), "verifier": {"E": [], "E_source": "none"}}, CreditConfig(), None,
     "missing trace: the verifier's records were not captured (verifier.E_source is none)", 2),
    ({"commands": []}, CreditConfig(), 2, "missing trace: verifier: missing", 2),
    (episode([], []), CreditConfig(), 3, "empty command-credit output: the trajectory has no commands", 3),
    (_two_turns(0.0, 0.0), CreditConfig(), None, "no turn has positive credit", 2),
    (_two_turns(1.0, 1.0), CreditConfig(), None, "equal credit on every turn", 2),
    ({**_two_turns(1.0, 1.0), "commands": [{"turn": 0}]}, CreditConfig(), None,
     "missing trace: commands[0].text: missing", 1),
])
def test_table4_fallbacks_give_unit_factors_and_a_reason(trajectory, config, num_turns, reason, turns):
    assert step_factors_for(trajectory, config, num_turns) == ([1.0] * turns, reason)


def test_an_exception_inside_the_credit_gives_unit_factors(monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(depgpo.credit, "write_credit", broken)
    assert step_factors_for(_two_turns(0.5, 1.0)) == ([1.0, 1.0], "exception: RuntimeError: boom")


def test_compute_credit_names_the_bad_field():
    with pytest.raises(TrajectoryError, match=r"commands\[0\]\.writes\[0\]\.path: expected a string, got int"):
        compute_credit(episode([command(0, "x", writes=({"path": 3},))], []))
    with pytest.raises(TrajectoryError, match="num_turns: 1 turns, but a command belongs to turn 1"):
        compute_credit(_two_turns(0.5, 1.0), num_turns=1)


# ---- configuration and diagnostics ---------------------------------------------------------------------------------

def test_config_validation_and_mapping():
    with pytest.raises(ValueError, match="valid: full, binary_write, no_verifier_filter, no_read_credit, direct_only"):
        CreditConfig(variant="no_credit")
    with pytest.raises(ValueError, match="beta must lie in"):
        CreditConfig(beta=1.5)
    config = CreditConfig.from_mapping({"beta": 0.25, "tracked_roots": ["/app", "/out"], "variant": "direct_only"})
    assert config == CreditConfig(beta=0.25, tracked_roots=("/app", "/out"), variant="direct_only")
    with pytest.raises(ValueError, match=r"unknown credit config keys \['gamma'\]"):
        CreditConfig.from_mapping({"gamma": 1.0})
    with pytest.raises(ValueError, match="no capturing groups"):
        CreditConfig(token_pattern=r"(\w+)")


def test_diagnostics_and_their_aggregate():
    diagnostics = [compute_credit(example.trajectory, num_turns=example.num_turns).diagnostics
                   for example in EXAMPLES]
    assert diagnostics[1] | {"processing_ms": 0} == {
        "commands": 3, "turns": 5, "usable": True, "fallback": None, "credited": True, "write_commands": 2,
        "positive_write_commands": 2, "read_commands": 1, "positive_read_commands": 0,
        "positive_writes_with_indirect": 1, "step_factor_std": pytest.approx(1.2247, abs=1e-4),
        "verifier_source": "trace", "variant": "full", "processing_ms": 0}
    fallback = depgpo.credit.credit_with_fallback({"commands": "?"}).diagnostics
    summary = aggregate_diagnostics(diagnostics + [fallback])
    assert summary["trajectories"] == 4
    assert summary["usable_pct"] == summary["fallback_pct"] * 3 == 75.0
    assert summary["positive_write_commands_pct"] == pytest.approx(100 * 5 / 7)  # writes: 1 + 2 + 4
    assert summary["positive_read_commands_pct"] == pytest.approx(100 * 1 / 5)  # reads: 2 + 1 + 2 (t17 only)
    assert summary["positive_writes_with_indirect_pct"] == pytest.approx(100 * 1 / 5)
    assert summary["fallbacks"] == {"missing trace": 1}
    assert math.isnan(aggregate_diagnostics([])["usable_pct"])
