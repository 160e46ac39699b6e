"""`trajectory.json`, the episode record every stage consumes: its fields as types, and the one way to build one.

The sandbox (`depgpo.env.episode`) and offline inference (`depgpo.inference`) build trajectories through
`make_trajectory`; credit, the reports and the offline loaders read them through `depgpo.trajectory.load`.
docs/trajectory-schema.md describes every field below; tests/trajectory/test_schema.py keeps the two in step.
Paths are absolute paths inside the sandbox; a port is `tcp:PORT`, `udp:PORT` or `unix:/path`, a process (in E)
`proc:NAME`.
"""

# No `from __future__ import annotations`: TypedDict must see NotRequired at class creation.
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

SCHEMA_VERSION = 1  # bumped on any incompatible change
READABLE_VERSIONS = (1,)  # the versions this code reads
# More turns than this marks a corrupt record (a 32k-token context holds a few hundred turns at most); the bound
# keeps garbage such as `"turn": 10**12` from allocating factors.
MAX_TURNS = 100_000


class WriteRecord(TypedDict):
    path: str
    created: bool  # did not exist before the command
    text: bool  # line-tracked (scope.TEXT_MAX_BYTES, scope.TEXT_MAX_LINES)
    lines_written: list[str]  # the lines this command wrote (a multiset; text files only)
    content_after: list[str] | None  # whole content after the command (text files only)
    hash_after: str | None  # "sha256:…", "symlink:TARGET"; "unknown:…" when inferred from text


class ProcessRecord(TypedDict):
    pid: int | None
    name: str  # executable basename
    alive_after: NotRequired[bool]  # processes_started: outlived its command
    owner: NotRequired[int]  # processes_killed / _probed: index of the command that started it


class CommandEffects(TypedDict):
    """The record fields of one command: what it read and wrote, in the tracked scope."""

    reads: list[str]  # opened for reading or executed
    stats: list[str]  # existence checks (stat, access, readdir), failed lookups included
    writes: list[WriteRecord]
    deletions: list[str]  # unlink, rmdir, the source of a rename
    ports_bound: list[str]
    ports_connected: list[str]
    processes_started: list[ProcessRecord]
    processes_killed: list[ProcessRecord]
    processes_probed: list[ProcessRecord]  # /proc reads (ps, pgrep)
    untraced_changes: list[str]  # files changed that the trace did not attribute (the stat walk's net)
    # Records the command read only after it had replaced them whole itself (`cat > f <<EOF … EOF; cat f`): what it
    # read there was its own. Of reads, stats and ports_connected; absent in older records: no read known to be
    # after the command's own write (docs/credit-decisions.md#d-order)
    reads_after_write: NotRequired[list[str]]


class CommandRecord(CommandEffects):
    index: int  # position in `commands`
    turn: int  # the model turn that issued it
    text: str
    observation: str  # what the agent saw
    exit_code: int | None  # None: timed out or interrupted
    timed_out: bool
    duration_s: float | None
    recovery: NotRequired[list[str]]  # how the shell was brought back after the command ("C-c", "C-d", "kill")
    disk_limit: NotRequired[str]  # the command filled the episode's disk limit ("bytes: N" or "inodes: N")
    harness_error: NotRequired[str]  # the harness failure the episode ended on


class InspectedRecord(TypedDict):
    record: str
    how: Literal["read", "stat", "missing", "connect", "probe", "static"]


class TamperingRecord(TypedDict):
    path: str
    kind: str  # runner_shadow | startup_hook | runner_replaced | reward_by_agent_code | tests_read_by_agent_code |
    #            link_to_judge (docs/threat-model.md)
    how: str  # read | executed | written | written unseen
    change: str  # created | changed | unknown | changed while the verifier ran


class VerifierSection(TypedDict):
    E: list[str]  # the records the verifier inspected
    E_detail: list[InspectedRecord]
    E_source: Literal["trace", "static", "none"]
    reward: float | None  # in [0, 1]; None when unknown (offline inference)
    reward_source: str | None  # reward.json | reward.txt | weights.json | pytest | exit_code | error | tampering
    tests: dict[str, bool]  # per-test outcome, when pytest reported it
    exit_code: int | None
    output: str  # verifier stdout and stderr (truncated)
    duration_s: float | None
    error: str | None  # why the verifier could not give a reward of its own
    tampering: NotRequired[list[TamperingRecord]]
    reward_before_tampering: NotRequired[float]  # only when tampering set the reward to 0
    view: NotRequired[Literal["image", "full"]]  # what it saw of the agent's work (docs/threat-model.md)


class FinalFile(TypedDict):
    exists: bool
    hash: str | None
    lines: list[str] | None  # text files only


class FinalProcess(TypedDict):
    pid: int | None
    name: str
    owner: int


class FinalPort(TypedDict):
    port: str
    owner: int


class FinalSection(TypedDict):
    """The state the verifier found (taken before it ran)."""

    files: dict[str, FinalFile]
    alive_processes: NotRequired[list[FinalProcess]]
    listening_ports: NotRequired[list[FinalPort]]


class TaskRef(TypedDict):
    id: str | None
    path: str | None
    format: str | None  # harbor | tb1 | synthetic


class Timings(TypedDict):
    setup_s: float | None
    commands_s: float | None
    verifier_s: float | None
    parse_s: float | None
    total_s: float | None


class EnvironmentRef(TypedDict):
    backend: Literal["host", "image"]
    image: str | None  # the image the episode ran in (None: the host's root)
    source: str        # host | local | pulled | built
    notes: list[str]   # how the environment differs from the task's own image (bases bootstrapped, approximated)
    privilege: NotRequired[Literal["root", "rootless"]]  # the sandbox's privilege level (env/sandbox/privilege.py)
    cpu: NotRequired[int | None]  # the CPU its processes were pinned to (env/sandbox/cpu_slots.py); None: unpinned


class UnreplayableStep(TypedDict):
    turn: int | None  # the model turn that held it
    kind: str         # keystrokes | interactive | wait | tool_call | editor_edit (docs/replay.md)
    detail: str


class Fidelity(TypedDict):
    reward_logged: float | None       # the log's own reward (None: unlabelled)
    reward_replayed: float | None
    reward_matches: bool | None       # None when either is unknown
    observations_compared: int        # logged observations the replay could be held against
    observations_differing: int
    differing_share: float | None
    differing: list[int]              # indices of the replayed commands whose output or exit code differs


class ReplayRef(TypedDict):
    source: str                        # the file (and position) the commands came from
    source_format: str                 # trajectory | commands | chat | terminus2 | fenced_actions | tb1_trial | harbor
    logged_task: str | None            # the task the log names (None: it names none)
    logged_index: list[int | None]     # per replayed command, its index in the source
    fidelity: Fidelity
    unreplayable: list[UnreplayableStep]  # what the log holds that the replay left out


class Trajectory(TypedDict):
    schema_version: int
    task: TaskRef
    instruction: str
    workdir: str
    tracked_roots: list[str]  # file records outside these are not tracked (scope.tracked_roots)
    source: Literal["traced", "static"]  # traced by the sandbox, or inferred from the command texts
    commands: list[CommandRecord]
    verifier: VerifierSection | None  # None: the episode ended before its verifier ran
    final: FinalSection | None
    timings: Timings
    errors: list[str]  # recorded failures (setup, replay, tracer, disk limit, harness)
    num_turns: NotRequired[int]  # model turns (the agent loop, offline inference): may exceed the commands' turns
    environment: NotRequired[EnvironmentRef]  # traced episodes: where the system directories came from
    replay: NotRequired[ReplayRef]  # `depgpo replay`: where the commands came from and how faithfully they replayed
    reading: NotRequired[dict[str, Any]]  # offline inference: what the log's reading understood and not


@dataclass(frozen=True)
class FileVersion:
    """One version of a file as a trajectory records it (`final.files`, the sandbox's cache of tracked files)."""

    exists: bool
    hash: str | None = None  # "sha256:…", "dir", "symlink:TARGET", "special", "unreadable", "unknown:…" (inferred);
    #                          None when missing
    lines: list[str] | None = None  # content, for a line-tracked text file

    def as_final(self) -> FinalFile:
        return {"exists": self.exists, "hash": self.hash, "lines": self.lines}


MISSING = FileVersion(exists=False)


def empty_effects() -> CommandEffects:
    return CommandEffects(reads=[], stats=[], writes=[], deletions=[], ports_bound=[], ports_connected=[],
                          processes_started=[], processes_killed=[], processes_probed=[], untraced_changes=[],
                          reads_after_write=[])


def unverified(E: list[str], error: str | None = None, **fields: Any) -> VerifierSection:
    """A verifier section without a verifier run: E from static extraction (or none), reward unknown or given."""
    section = VerifierSection(E=list(E), E_detail=[{"record": r, "how": "static"} for r in E],
                              E_source="static" if E else "none", reward=None, reward_source=None, tests={},
                              exit_code=None, output="", duration_s=None, error=error)
    section.update(fields)  # type: ignore[typeddict-item]
    return section


def make_trajectory(*, task: TaskRef, instruction: str, workdir: str, tracked_roots: list[str],
                    source: Literal["traced", "static"], commands: list[CommandRecord],
                    verifier: VerifierSection | None, final: FinalSection | None, timings: Timings,
                    errors: list[str], num_turns: int | None = None,
                    environment: EnvironmentRef | None = None) -> Trajectory:
    """The record, with its fields in the documented order."""
    trajectory = Trajectory(schema_version=SCHEMA_VERSION, task=task, instruction=instruction, workdir=workdir,
                            tracked_roots=tracked_roots, source=source, commands=commands, verifier=verifier,
                            final=final, timings=timings, errors=errors)
    if num_turns is not None:
        trajectory["num_turns"] = num_turns
    if environment is not None:
        trajectory["environment"] = environment
    return trajectory
