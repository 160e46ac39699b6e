"""The paper's worked credit examples (Tables 12-14, docs/credit.md#worked-examples) as trajectories shaped like trajectory.json.

Each `Example` holds what a sandbox needs to replay it (instruction, working directory, the task's files, the
commands by turn, the verifier records E) and the trace a sandbox is expected to record for it, built by hand
here: the files each command reads and writes in the tracked scope, with line content. `expected` is the paper's
outcome per turn, (role, q(c)), at β = 0.5. Commands run in `workdir`; relative paths in the trace are resolved.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    name: str
    trajectory: dict
    num_turns: int
    setup_files: dict[str, str]  # path -> content, present before the agent starts
    expected: dict[int, tuple[str, float]]  # turn -> (role, q(c)) as the paper reports them

    @property
    def commands(self) -> list[tuple[int, str]]:
        """(turn, command text) in execution order."""
        return [(command["turn"], command["text"]) for command in self.trajectory["commands"]]

    @property
    def verifier_records(self) -> list[str]:
        return self.trajectory["verifier"]["E"]


def content_hash(lines: list[str]) -> str:
    return "sha256:" + hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


def command(turn: int, text: str, observation: str = "", reads: tuple[str, ...] = (), stats: tuple[str, ...] = (),
            writes: tuple[dict, ...] = (), deletions: tuple[str, ...] = ()) -> dict:
    return {
        "turn": turn, "text": text, "observation": observation, "exit_code": 0, "timed_out": False,
        "duration_s": 0.05, "reads": list(reads), "stats": list(stats), "writes": list(writes),
        "deletions": list(deletions), "ports_bound": [], "ports_connected": [], "processes_started": [],
        "processes_killed": [], "processes_probed": [], "untraced_changes": [],
    }


def text_write(path: str, lines_written: list[str], content_after: list[str], created: bool = True) -> dict:
    return {"path": path, "created": created, "text": True, "lines_written": lines_written,
            "content_after": content_after, "hash_after": content_hash(content_after)}


def binary_write(path: str, digest: str) -> dict:
    return {"path": path, "created": True, "text": False, "hash_after": f"sha256:{digest}"}


def trajectory(task_id: str, instruction: str, commands: list[dict], verifier_records: list[str],
               final_files: dict[str, list[str] | None], workdir: str = "/app") -> dict:
    """`final_files`: the content of each written or verified path when the verifier ran; None if absent."""
    return {
        "schema_version": 1,
        "task": {"id": task_id, "path": f"/tasks/{task_id}", "format": "harbor"},
        "instruction": instruction,
        "workdir": workdir,
        "tracked_roots": [workdir],
        "source": "traced",
        "commands": [{"index": index, **entry} for index, entry in enumerate(commands)],
        "verifier": {
            "E": verifier_records,
            "E_detail": [{"record": record, "how": "read"} for record in verifier_records],
            "E_source": "trace", "reward": 1.0, "reward_source": "reward.txt", "tests": {}, "exit_code": 0,
            "output": "", "duration_s": 0.5, "error": None,
        },
        "final": {
            "files": {path: {"exists": lines is not None, "lines": lines,
                             "hash": content_hash(lines) if lines is not None else None}
                      for path, lines in final_files.items()},
            "alive_processes": [],
            "listening_ports": [],
        },
        "timings": {}, "errors": [],
    }


# ---- Table 12: count-dataset-tokens (supporting read) --------------------------------------------------------

def _token_dataset() -> str:
    """Rows whose science-domain texts hold 63841 whitespace-separated tokens in all."""
    rows = [("science", 30000), ("math", 1200), ("science", 30000), ("science", 3841)]
    return "".join(json.dumps({"domain": domain, "text": " ".join(["tok"] * size)}) + "\n" for domain, size in rows)


COUNT_SCRIPT = """python3 <<'EOF'
import json
rows = [json.loads(line) for line in open("/app/data/sample.jsonl")]
print(sum(len(row["text"].split()) for row in rows if row["domain"] == "science"))
EOF"""

COUNT_DATASET_TOKENS = Example(
    name="count-dataset-tokens",
    trajectory=trajectory(
        "count-dataset-tokens",
        "Count the whitespace-separated tokens in the science-domain rows of /app/data/sample.jsonl and write the "
        "count, digits only, to /app/answer.txt.",
        [
            command(17, COUNT_SCRIPT, observation="63841\n",
                    reads=("/app/data/sample.jsonl", "/usr/lib/python3.12/json/__init__.py")),
            command(18, 'echo "63841" > /app/answer.txt', writes=(text_write("/app/answer.txt", ["63841"], ["63841"]),)),
            command(19, "cat /app/answer.txt", observation="63841\n", reads=("/app/answer.txt",)),
        ],
        ["/app/answer.txt"],
        {"/app/answer.txt": ["63841"]},
    ),
    num_turns=20,
    setup_files={"/app/data/sample.jsonl": _token_dataset()},
    expected={17: ("supporting read", 0.5), 18: ("direct write", 1.0), 19: ("read with no downstream use", 0.0)},
)


# ---- Table 13: bn-fit-modify (indirect write) -----------------------------------------------------------------

MODIFY_BN = [
    "library(bnlearn)",
    'data <- read.csv("/app/bn_sample_10k.csv")',
    "dag <- hc(data)",
    'write.csv(arcs(dag), "/app/learned_dag.csv", row.names = FALSE)',
    "fit <- bn.fit(dag, data)",
    "fit_int <- mutilated(fit, evidence = list(Y = 0))",
    'write.csv(arcs(bn.net(fit_int)), "/app/intervened_dag.csv", row.names = FALSE)',
    "set.seed(42)",
    'write.csv(rbn(fit_int, n = 10000), "/app/final_bn_sample.csv", row.names = FALSE)',
]
LEARNED_DAG = ['"from","to"', '"U","Y"', '"Y","R"', '"D","R"', '"M","D"']
INTERVENED_DAG = ['"from","to"', '"Y","R"', '"D","R"', '"M","D"']
FINAL_SAMPLE = ['"U","Y","R","D","M"', "51.32,0,48.77,53.9,47.01", "49.85,0,45.12,50.04,52.66",
                "50.47,0,46.38,49.71,50.23"]
R_INSTALL_LOG = """Downloading package from url: https://cloud.r-project.org/src/contrib/Archive/bnlearn/bnlearn_4.9.tar.gz
* installing *source* package 'bnlearn' ...
** package 'bnlearn' successfully unpacked and MD5 sums checked
** byte-compile and prepare package for lazy loading
* DONE (bnlearn)
"""

BN_FIT_MODIFY = Example(
    name="bn-fit-modify",
    trajectory=trajectory(
        "bn-fit-modify",
        "Recover the DAG of the Bayesian network that generated /app/bn_sample_10k.csv and save its edges to "
        "/app/learned_dag.csv. Intervene on Y by setting it to 0, save the edges of the intervened network to "
        "/app/intervened_dag.csv, and save 10k samples from it to /app/final_bn_sample.csv.",
        [
            command(2, """R -e 'remotes::install_version("bnlearn", version = "4.9", repos = "https://cloud.r-project.org")'""",
                    observation=R_INSTALL_LOG,
                    reads=("/usr/lib/R/library/remotes/R/remotes.rdb",),
                    writes=(text_write("/usr/local/lib/R/site-library/bnlearn/DESCRIPTION",
                                       ["Package: bnlearn", "Version: 4.9"], ["Package: bnlearn", "Version: 4.9"]),
                            binary_write("/usr/local/lib/R/site-library/bnlearn/R/bnlearn.rdb", "1f" * 32),
                            binary_write("/tmp/RtmpQ2x9/downloaded_packages/bnlearn_4.9.tar.gz", "2e" * 32))),
            command(3, "cat > modify_bn.R <<'EOF'\n" + "\n".join(MODIFY_BN) + "\nEOF",
                    writes=(text_write("/app/modify_bn.R", MODIFY_BN, MODIFY_BN),)),
            command(4, "Rscript modify_bn.R",
                    reads=("/app/modify_bn.R", "/app/bn_sample_10k.csv",
                           "/usr/local/lib/R/site-library/bnlearn/R/bnlearn.rdb"),
                    writes=(text_write("/app/learned_dag.csv", LEARNED_DAG, LEARNED_DAG),
                            text_write("/app/intervened_dag.csv", INTERVENED_DAG, INTERVENED_DAG),
                            text_write("/app/final_bn_sample.csv", FINAL_SAMPLE, FINAL_SAMPLE))),
        ],
        ["/app/learned_dag.csv", "/app/intervened_dag.csv", "/app/final_bn_sample.csv"],
        {"/app/modify_bn.R": MODIFY_BN, "/app/learned_dag.csv": LEARNED_DAG,
         "/app/intervened_dag.csv": INTERVENED_DAG, "/app/final_bn_sample.csv": FINAL_SAMPLE},
    ),
    num_turns=5,
    setup_files={"/app/bn_sample_10k.csv": '"U","Y","R","D","M"\n' + "50.1,47.3,49.8,51.2,48.6\n" * 20},
    expected={2: ("no recorded dependency", 0.0), 3: ("indirect write", 1.0), 4: ("direct write", 1.0)},
)


# ---- Table 14: constraints-scheduling (relevant and irrelevant writes) -----------------------------------------

ICS = "/app/meeting_scheduled.ics"
FIRST_TRY = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Scheduler//EN", "BEGIN:VEVENT", "UID:meeting-001@scheduler",
             "DTSTART:20240115T090000Z", "DTEND:20240115T100000Z", "SUMMARY:Team Meeting", "END:VEVENT",
             "END:VCALENDAR"]
SECOND_TRY = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Scheduler//EN", "BEGIN:VEVENT",
              "UID:meeting-002@scheduler", "DTSTART:20240116T140000Z", "DTEND:20240116T150000Z",
              "SUMMARY:Team Meeting", "END:VEVENT", "END:VCALENDAR"]
FINAL_ICS = SECOND_TRY[:8] + ["ATTENDEE:mailto:alice@example.com", "ATTENDEE:mailto:bob@example.com",
                              "ATTENDEE:mailto:carol@example.com"] + SECOND_TRY[8:]


def _heredoc(lines: list[str]) -> str:
    return f"cat <<'EOF' > {ICS}\n" + "\n".join(lines) + "\nEOF"


CONSTRAINTS_SCHEDULING = Example(
    name="constraints-scheduling",
    trajectory=trajectory(
        "constraints-scheduling",
        "Schedule a one-hour meeting for Alice, Bob and Carol that fits their calendars and constraints, and write "
        f"it as an iCalendar file to {ICS}.",
        [
            command(4, _heredoc(FIRST_TRY), writes=(text_write(ICS, FIRST_TRY, FIRST_TRY),)),
            command(5, f"cat {ICS}", observation="\n".join(FIRST_TRY) + "\n", reads=(ICS,)),
            command(6, f"rm {ICS}", stats=(ICS,), deletions=(ICS,)),
            command(7, "printf '" + "\\n".join(SECOND_TRY) + f"\\n' > {ICS}",
                    writes=(text_write(ICS, SECOND_TRY, SECOND_TRY),)),
            command(8, f"cat {ICS}", observation="\n".join(SECOND_TRY) + "\n", reads=(ICS,)),
            command(10, _heredoc(FINAL_ICS), writes=(text_write(ICS, FINAL_ICS, FINAL_ICS, created=False),)),
        ],
        [ICS],
        {ICS: FINAL_ICS},
    ),
    num_turns=11,
    setup_files={},
    expected={4: ("deleted before contribution", 0.0), 5: ("read with no downstream use", 0.0),
              6: ("no credited output", 0.0), 7: ("direct write", 1.0), 8: ("read with no downstream use", 0.0),
              10: ("direct write", 1.0)},
)

EXAMPLES = (COUNT_DATASET_TOKENS, BN_FIT_MODIFY, CONSTRAINTS_SCHEDULING)
