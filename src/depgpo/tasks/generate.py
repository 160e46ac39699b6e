"""A seeded generator of tiny terminal tasks in Harbor format, one family per dependency kind DepGPO credits.

Every task is a Harbor directory (instruction.md, task.toml, environment/, tests/, solution/solve.sh) plus
`solution/oracle.json` (the oracle as a list of turns, one shell command each) and `solution/distractors.json`
(commands outside the task that SFT data generation may interleave with the oracle's turns: reads of an unrelated
file, and one write outside anything the verifier inspects). The verifier is a shell `tests/test.sh` by default
(depgpo.tasks.checks; `verifier="pytest"` writes Harbor's pytest layout instead).

    family              what the oracle does (after looking: ls, cat)          the record the verifier inspects
    supporting_read     cat a file, echo the value it shows to answer.txt      /app/answer.txt (value read, not given)
    script_then_run     write a script with a heredoc, then run it             the file the script writes (indirect)
    config_edit         sed -i one line of a config file                       the config file, line by line
    copy_value          read a value in one file, sed it into a config line    the config file (two reads feed it)
    append_chain        write a line, read a value, append it                  the file (a chain of two writes)
    delete_recreate     rm a stale file, then write it again                   the recreated file
    server_port         write a page, serve it: python3 -m http.server         tcp:PORT (and the page)
    required_deletion   rm a file that must be gone                            the deleted path (absent)

Splits: `sft` (tasks whose oracle runs become SFT conversations; both wordings), `pool` (candidates for filtering
and RL; both wordings), `test_tb20` (the first wording) and `test_tb21` (test_tb20's task ids and families with
other parameters and the second wording, as TB2.1 revises TB2.0). File names, keys and words come from shared
vocabularies and vary per task, so a policy has to read them from the instruction and the observations.
Answer values and ports are disjoint between training and each test split (interleaved: their digit sum mod 5),
so no test answer occurs in training. The same seed writes the same bytes.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from depgpo.tasks.checks import Absent, Check, FileLines, Served, verifier_files
from depgpo.tasks.task import TaskFormatError


@dataclass(frozen=True)
class SplitParams:
    values: tuple[int, ...]     # answer numbers; disjoint between training and each test split
    ports: tuple[int, ...]      # server ports; likewise, within 18500-18999
    wordings: tuple[int, ...]   # which of a family's two instruction wordings the split uses


def _residues(low: int, high: int, residues: tuple[int, ...]) -> tuple[int, ...]:
    """The numbers in [low, high) whose digit sum mod 5 is in `residues`. Splits interleave instead of taking
    ranges of their own, and by digit sum rather than by the number's own remainder, so every digit occurs at
    every position in every split: a policy that copies a test value writes no digit where training never had it
    (by remainder, a test value's last digit was one training never ended on)."""
    return tuple(n for n in range(low, high) if sum(map(int, str(n))) % 5 in residues)


TRAINING, TB20, TB21 = (0, 1, 2), (3,), (4,)
SPLITS = {  # sft and pool are both training data: they share numbers, and their tasks differ by their seeds
    "sft": SplitParams(_residues(1000, 10000, TRAINING), _residues(18500, 19000, TRAINING), wordings=(0, 1)),
    "pool": SplitParams(_residues(1000, 10000, TRAINING), _residues(18500, 19000, TRAINING), wordings=(0, 1)),
    "test_tb20": SplitParams(_residues(1000, 10000, TB20), _residues(18500, 19000, TB20), wordings=(0,)),
    "test_tb21": SplitParams(_residues(1000, 10000, TB21), _residues(18500, 19000, TB21), wordings=(1,)),
}

# Vocabulary. No family uses an UNRELATED_FILES or SCRATCH_FILES name, so the distractors never touch a file the
# task is about.
WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "gale", "harbor", "iris", "juniper", "kelp", "lotus",
         "maple", "nectar", "onyx", "pine", "quartz", "raven", "sage", "tundra", "umber", "violet", "willow", "zephyr")
DATA_FILES = ("data.txt", "ledger.txt", "stats.txt", "reading.txt", "inventory.txt", "metrics.txt")
VALUE_KEYS = ("count", "total", "limit", "offset", "budget", "quota", "score", "weight")
SCRIPT_NAMES = ("make_report.sh", "build.sh", "generate.sh", "produce.sh", "run_job.sh")
OUTPUT_FILES = ("report.txt", "result.txt", "output.txt", "summary.txt", "digest.txt", "status.txt")
LINE_LABELS = ("total", "build", "version", "batch", "run", "checksum")
CONFIG_FILES = ("server.conf", "app.ini", "service.cfg", "worker.conf", "daemon.conf")
CONFIG_KEYS = ("port", "workers", "timeout", "retries", "max_clients", "cache_size")
PAGES = ("status.txt", "health.txt", "version.txt", "ping.txt", "motd.txt")
JUNK_SUFFIXES = (".tmp", ".lock", ".bak", ".old")
KEEP_FILES = ("keep.txt", "main.txt", "config.txt", "index.txt")
UNRELATED_FILES = ("README.txt", "notes.md", "todo.txt", "CHANGELOG.md")
SCRATCH_FILES = ("scratch.txt", "progress.log", "seen.txt", "work.txt")  # under /tmp: written, never inspected

@dataclass(frozen=True)
class TaskSpec:
    family: str
    instruction: str
    files: dict[str, str]       # path under /app -> content, copied in by the Dockerfile
    checks: list[Check]         # what the verifier checks (depgpo.tasks.checks)
    oracle: list[str]           # one shell command per turn
    wrong: list[str]            # a plausible mistake; tests show that the verifier rejects it
    record: str                 # the record this family is about: the verifier must inspect it
    distractors: tuple[str, ...] = ()


class Draw:
    """The random choices of one task; numbers and ports come from its split's sets."""

    def __init__(self, rng: random.Random, split: SplitParams):
        self.rng, self.split = rng, split

    def value(self) -> int:
        return self.rng.choice(self.split.values)

    def values(self, k: int) -> list[int]:
        return self.rng.sample(self.split.values, k)

    def port(self) -> int:
        return self.rng.choice(self.split.ports)

    def small_number(self) -> int:
        """A number below every split's value range: stale or old content, never an answer."""
        return self.rng.randrange(10, 1000)

    def pick(self, options: tuple[str, ...]) -> str:
        return self.rng.choice(options)

    def sample(self, options: tuple[str, ...], k: int) -> list[str]:
        return self.rng.sample(options, k)

    def wording(self, templates: tuple[str, str]) -> str:
        return templates[self.rng.choice(self.split.wordings)]


# --- families --------------------------------------------------------------------------------------------------
# Each returns the family's part of a task; `build_task` adds the unrelated file and the distractors. Oracles look
# before they act and check after (`ls`, `cat`), as agents do: exploratory reads that credit should not pay, beside
# reads whose output the answer needs (supporting_read, copy_value, append_chain, config_edit's old line), and back
# up a file before editing it (`cp` to /tmp: a write outside E). Five commands each.
# Every value that reaches a command is a plain token (letters, digits, - _ = .), so no quoting is needed.


def _listing(draw: Draw) -> tuple[str, str, str, int]:
    """A data file of three `key: value` lines: its name, its content, and the key and value a task asks for."""
    data_file, keys, values = draw.pick(DATA_FILES), draw.sample(VALUE_KEYS, 3), draw.values(3)
    target = draw.rng.randrange(3)
    return data_file, "".join(f"{k}: {v}\n" for k, v in zip(keys, values)), keys[target], values[target]


def _values(listing: str) -> list[int]:
    return [int(line.split(": ")[1]) for line in listing.splitlines()]


def _next(values: list[int], value: int) -> int:
    """The value on the line after `value`'s (wrapping): a plausible wrong answer."""
    return values[(values.index(value) + 1) % len(values)]


def supporting_read(draw: Draw) -> TaskSpec:
    data_file, listing, key, value = _listing(draw)
    values = _values(listing)
    instruction = draw.wording((
        "Read the value of {key} in /app/{file} and write it to /app/answer.txt.",
        "/app/{file} lists several values. Save the {key} value to /app/answer.txt.",
    )).format(key=key, file=data_file)
    return TaskSpec(
        family="supporting_read",
        instruction=instruction,
        files={data_file: listing},
        checks=[FileLines("/app/answer.txt", (str(value),))],
        oracle=["ls /app", f"cat /app/{data_file}", f"grep {key} /app/{data_file}", f"echo {value} > /app/answer.txt",
                "cat /app/answer.txt"],
        wrong=[f"cat /app/{data_file}", f"echo {_next(values, value)} > /app/answer.txt"],  # the next line's
        record="/app/answer.txt",
    )


def script_then_run(draw: Draw) -> TaskSpec:
    script, output = draw.pick(SCRIPT_NAMES), draw.pick(OUTPUT_FILES)
    line = f"{draw.pick(LINE_LABELS)}={draw.value()}"
    instruction = draw.wording((
        "Write a shell script /app/{script} that writes the line {line} to /app/{output}, then run it with sh.",
        "Create /app/{script}, a sh script that puts {line} into /app/{output}. Run the script.",
    )).format(script=script, line=line, output=output)
    write_script = f"cat > /app/{script} <<'EOF'\n#!/bin/sh\necho {line} > /app/{output}\nEOF"
    return TaskSpec(
        family="script_then_run",
        instruction=instruction,
        files={},
        # Only the output is checked: the script earns its credit through the run that reads it (indirect write).
        checks=[FileLines(f"/app/{output}", (line,))],
        oracle=["ls /app", write_script, f"cat /app/{script}", f"sh /app/{script}", f"cat /app/{output}"],
        wrong=[write_script],  # never runs it
        record=f"/app/{output}",
    )


def _config(draw: Draw) -> tuple[str, dict[str, int], str]:
    """A config file's name, its `key = value` settings (small numbers), and the key a task changes."""
    config = draw.pick(CONFIG_FILES)
    keys = draw.sample(CONFIG_KEYS, 4)
    return config, {k: draw.small_number() for k in keys}, draw.pick(tuple(keys))


def _set(settings: dict[str, int], key: str, value: int) -> tuple[str, ...]:
    return tuple(f"{k} = {value if k == key else v}" for k, v in settings.items())


def config_edit(draw: Draw) -> TaskSpec:
    config, settings, key = _config(draw)
    old, new = settings[key], draw.value()
    instruction = draw.wording((
        "In /app/{config}, change {key} from {old} to {new}. Leave every other line as it is.",
        "Set {key} = {new} in /app/{config} (it is {old} now). Do not touch the other lines.",
    )).format(config=config, key=key, old=old, new=new)
    return TaskSpec(
        family="config_edit",
        instruction=instruction,
        files={config: "".join(line + "\n" for line in _set(settings, key, old))},
        checks=[FileLines(f"/app/{config}", _set(settings, key, new))],
        oracle=["ls /app", f"cat /app/{config}", f"cp /app/{config} /tmp/{config}.bak",
                f"sed -i 's/^{key} = {old}$/{key} = {new}/' /app/{config}", f"cat /app/{config}"],
        wrong=[f"echo '{key} = {new}' > /app/{config}"],  # rewrites the whole file
        record=f"/app/{config}",
    )


def copy_value(draw: Draw) -> TaskSpec:
    """A value read from one file written into another's line: both reads feed the edit (the old line's value
    is shown only by the config file)."""
    source, listing, source_key, value = _listing(draw)
    config, settings, key = _config(draw)
    old = settings[key]
    instruction = draw.wording((
        "Set {key} in /app/{config} to the {source_key} value listed in /app/{source}.",
        "/app/{source} lists several values. Copy its {source_key} value into /app/{config} as the new {key}.",
    )).format(key=key, config=config, source_key=source_key, source=source)
    return TaskSpec(
        family="copy_value",
        instruction=instruction,
        files={source: listing,
               config: "".join(line + "\n" for line in _set(settings, key, old))},
        checks=[FileLines(f"/app/{config}", _set(settings, key, value))],
        oracle=[f"cat /app/{source}", f"cat /app/{config}", f"cp /app/{config} /tmp/{config}.bak",
                f"sed -i 's/^{key} = {old}$/{key} = {value}/' /app/{config}", f"cat /app/{config}"],
        wrong=[f"cat /app/{source}", f"cat /app/{config}",
               f"sed -i 's/^{key} = {old}$/{key} = {_next(_values(listing), value)}/' /app/{config}"],
        record=f"/app/{config}",
    )


def append_chain(draw: Draw) -> TaskSpec:
    """Two writes to one file, the second an append of a value read from another file: a write chain."""
    output = draw.pick(OUTPUT_FILES)
    data_file, listing, key, value = _listing(draw)
    header = f"{draw.pick(WORDS)}-{draw.value()}"
    instruction = draw.wording((
        "Write the line {header} to /app/{output}, then append the {key} value from /app/{data} as a second line.",
        "/app/{output} must have two lines: first {header}, then the {key} value that /app/{data} lists.",
    )).format(header=header, output=output, key=key, data=data_file)
    return TaskSpec(
        family="append_chain",
        instruction=instruction,
        files={data_file: listing},
        checks=[FileLines(f"/app/{output}", (header, str(value)))],
        oracle=["ls /app", f"echo {header} > /app/{output}", f"cat /app/{data_file}", f"echo {value} >> /app/{output}",
                f"cat /app/{output}"],
        wrong=[f"echo {header} > /app/{output}", f"echo {value} > /app/{output}"],  # overwrites the first line
        record=f"/app/{output}",
    )


def delete_recreate(draw: Draw) -> TaskSpec:
    output = draw.pick(OUTPUT_FILES)
    stale_word, word = draw.sample(WORDS, 2)
    content = f"{word}-{draw.value()}"
    instruction = draw.wording((
        "/app/{output} is stale. Delete it, then write a new /app/{output} that contains only {content}.",
        "Replace the stale /app/{output}: remove it and create it again with the single line {content}.",
    )).format(output=output, content=content)
    return TaskSpec(
        family="delete_recreate",
        instruction=instruction,
        files={output: f"{stale_word}-{draw.small_number()}\n"},
        checks=[FileLines(f"/app/{output}", (content,))],
        oracle=["ls /app", f"cat /app/{output}", f"rm /app/{output}", f"echo {content} > /app/{output}",
                f"cat /app/{output}"],
        wrong=[f"echo {content} >> /app/{output}"],  # appends to the stale content
        record=f"/app/{output}",
    )


def server_port(draw: Draw) -> TaskSpec:
    page, port = draw.pick(PAGES), draw.port()
    token = f"{draw.pick(WORDS)}-{draw.value()}"
    instruction = draw.wording((
        "Write {token} to /app/site/{page}, then serve /app/site over HTTP on 127.0.0.1 port {port} in the "
        "background.",
        "Serve the directory /app/site on 127.0.0.1:{port} with a background HTTP server. /app/site/{page} must "
        "contain {token}.",
    )).format(token=token, page=page, port=port)
    # `sleep 0.5`: the server has (in practice, about 3x over here) bound before its command returns, so the episode's
    # final state (taken just before the verifier runs) shows the port listening; the verifier retries anyway. Half a
    # second, well inside the tiny scale's 1 s command timeout: `sleep 1` raced it, and whether the command timed out
    # (and so its observation, and every token after it) depended on the machine's load.
    serve = "python3 -m http.server {port} --bind 127.0.0.1 --directory {root} >/dev/null 2>&1 & sleep 0.5"
    write_page = f"echo {token} > /app/site/{page}"
    return TaskSpec(
        family="server_port",
        instruction=instruction,
        files={"site/index.html": f"<h1>{draw.pick(WORDS)}</h1>\n"},
        # The verifier waits up to 2 s for the port: a server the agent started has had its 0.5 s and more by then.
        checks=[Served(port, page, token)],
        oracle=["ls /app", "ls /app/site", write_page, f"cat /app/site/{page}",
                serve.format(port=port, root="/app/site")],
        wrong=[write_page, serve.format(port=port, root="/app")],  # serves the parent directory: 404
        record=f"tcp:{port}",
    )


def required_deletion(draw: Draw) -> TaskSpec:
    junk = f"{draw.pick(WORDS)}-{draw.value()}{draw.pick(JUNK_SUFFIXES)}"
    keep = draw.pick(KEEP_FILES)
    keep_content = f"{draw.pick(WORDS)} {draw.small_number()}"
    instruction = draw.wording((
        "Delete /app/{junk}. Keep /app/{keep} as it is.",
        "/app/{junk} is no longer needed: remove it, but leave /app/{keep} in place.",
    )).format(junk=junk, keep=keep)
    return TaskSpec(
        family="required_deletion",
        instruction=instruction,
        files={junk: f"{draw.pick(WORDS)}\n", keep: keep_content + "\n"},
        checks=[Absent(f"/app/{junk}"), FileLines(f"/app/{keep}", (keep_content,))],
        oracle=["ls /app", f"cat /app/{keep}", f"cat /app/{junk}", f"rm /app/{junk}", "ls /app"],
        wrong=[f"rm /app/{keep}"],  # deletes the wrong file
        record=f"/app/{junk}",
    )


FAMILIES: dict[str, Callable[[Draw], TaskSpec]] = {
    "supporting_read": supporting_read,
    "script_then_run": script_then_run,
    "config_edit": config_edit,
    "copy_value": copy_value,
    "append_chain": append_chain,
    "delete_recreate": delete_recreate,
    "server_port": server_port,
    "required_deletion": required_deletion,
}


# --- building and writing tasks --------------------------------------------------------------------------------


def build_task(family: str, split: str, index: int, seed: int) -> TaskSpec:
    """Task `index` of `split` for `seed`: its own random stream, so a task does not depend on the others."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    # A string seed is hashed with SHA-512 by `random`: stable across runs and Python versions.
    draw = Draw(random.Random(f"{seed}/{split}/{index}"), SPLITS[split])
    spec = FAMILIES[family](draw)
    unrelated, scratch = draw.pick(UNRELATED_FILES), draw.pick(SCRATCH_FILES)
    first, second, note = draw.sample(WORDS, 3)
    return replace(
        spec,
        files={**spec.files, unrelated: f"Notes about {first} and {second}.\n"},
        distractors=("ls /app", "pwd", f"cat /app/{unrelated}", f"wc -l /app/{unrelated}",
                     f"echo {note} > /tmp/{scratch}"),
    )


def write_task(spec: TaskSpec, task_dir: Path, metadata: dict[str, str | int], verifier: str = "shell") -> Path:
    """Write `spec` as a Harbor task directory with a `verifier` (checks.VERIFIERS) test; `metadata` goes into
    task.toml's [metadata]."""
    tests = verifier_files(spec.checks, verifier)  # first: an unknown verifier writes nothing
    (task_dir / "environment").mkdir(parents=True)
    (task_dir / "tests").mkdir()
    (task_dir / "solution").mkdir()
    (task_dir / "instruction.md").write_text(spec.instruction + "\n")
    fields = {"difficulty": "easy", "category": "generated", "family": spec.family, "dependency_record": spec.record,
              **metadata}
    (task_dir / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())
        + "\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 120.0\n\n[environment]\nallow_internet = false\n")
    copies = []
    for relative, content in sorted(spec.files.items()):
        path = task_dir / "environment" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        copies.append(f"COPY {relative} /app/{relative}\n")
    (task_dir / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n" + "".join(copies))
    for name, content in tests.items():
        (task_dir / "tests" / name).write_text(content)
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\nset -e\ncd /app\n" + "\n".join(spec.oracle) + "\n")
    _write_json(task_dir / "solution" / "oracle.json", spec.oracle)
    _write_json(task_dir / "solution" / "distractors.json", list(spec.distractors))
    for script in (task_dir / "tests" / "test.sh", task_dir / "solution" / "solve.sh"):
        script.chmod(0o755)
    return task_dir


def generate_task_set(out_dir: Path, split: str, n: int, seed: int, families: list[str] | None = None,
                      verifier: str = "shell") -> list[Path]:
    """Write `n` tasks of `split` under `out_dir/split/` and its index.json; families take turns in FAMILIES order.

    Task ids are `<family>-<index>`, so test_tb20 and test_tb21 of the same size share ids and families.
    A split directory written before by this function is replaced; any other existing one is an error.
    """
    chosen = selected_families(families)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    split_dir = Path(out_dir) / split
    if split_dir.exists() and any(split_dir.iterdir()):  # an empty one (made by Snakemake for its output) is fine
        if not (split_dir / "index.json").is_file():
            raise FileExistsError(f"{split_dir} exists and was not written by the task generator; "
                                  f"remove it or choose another output directory")
        shutil.rmtree(split_dir)
    split_dir.mkdir(parents=True, exist_ok=True)
    index, paths = [], []
    for i in range(n):
        family = chosen[i % len(chosen)]
        task_id = f"{family.replace('_', '-')}-{i:03d}"
        spec = build_task(family, split, i, seed)
        paths.append(write_task(spec, split_dir / task_id, {"split": split, "seed": seed}, verifier))
        index.append({"id": task_id, "family": family})
    _write_json(split_dir / "index.json", {"split": split, "seed": seed, "tasks": index})
    return paths


def generate_all(out_dir: Path, seed: int, pool: int, test: int, families: list[str] | None = None,
                 sft: int = 0, verifier: str = "shell") -> dict[str, list[Path]]:
    """The pool of `pool` tasks, both test sets of `test` tasks each, and (when `sft` > 0) the sft split."""
    sizes = {"sft": sft, "pool": pool, "test_tb20": test, "test_tb21": test}
    return {split: generate_task_set(out_dir, split, n, seed, families, verifier)
            for split, n in sizes.items() if n or split != "sft"}


def selected_families(families: list[str] | None) -> list[str]:
    """The chosen family names in FAMILIES order (all when None); unknown names raise ValueError."""
    if families is None:
        return list(FAMILIES)
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown task families {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
    if not families:
        raise ValueError("no task family chosen")
    return [name for name in FAMILIES if name in families]


def oracle_commands(task_dir: Path) -> list[str]:
    """The oracle of a generated task: one shell command per turn (solution/oracle.json)."""
    return _command_list(Path(task_dir) / "solution" / "oracle.json")


def distractor_commands(task_dir: Path) -> list[str]:
    """Harmless commands that may be interleaved with the oracle's turns (solution/distractors.json)."""
    return _command_list(Path(task_dir) / "solution" / "distractors.json")


def _command_list(path: Path) -> list[str]:
    if not path.is_file():
        raise TaskFormatError(path, "file is missing", "generate the task with `depgpo tasks generate`")
    try:
        commands = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TaskFormatError(path, f"not valid JSON ({e})", "write a JSON list of command strings") from None
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        raise TaskFormatError(path, "must be a JSON list of command strings", 'write e.g. ["cat /app/data.txt"]')
    return commands


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=1) + "\n")
