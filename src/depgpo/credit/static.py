"""Static inference of command records: what a shell command reads and writes, from its text alone.

`depgpo credit --static` and the offline adapters use this when no sandbox trace exists. Each command is parsed
with tree-sitter-bash and walked by a small shell simulator that keeps what a trace would have told us: the
working directory (`cd`, also inside `&&` chains; subshells, pipeline stages and `$(…)` do not leak it), simple
variables (`X=/app/out`), and the content of every file whose content the text makes known (an `echo`, `printf`
or heredoc written literally). Files written in ways the text cannot reveal (`sed -i`, `python3 x.py > out`) get
`content_after = None` and the hash `unknown:<command index>`, so the credit core falls back to record level.

What static mode cannot see, and therefore leaves out: effects inside programs (`python3 solve.py` reads the
script, but not what the script opens or writes), globs, variables set at run time, which branch of an `if` or
`||` ran (every branch counts as run), and whether a command failed. A command that does not parse (unclosed
quote, unterminated heredoc) gets no records at all.
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypedDict

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

DEFAULT_WORKDIR = "/app"
HOME = "/root"

# The schema's line-tracking limits (spec §2): larger files are tracked by hash only.
TEXT_MAX_BYTES = 1 << 20
TEXT_MAX_LINES = 20_000

# Scripts running scripts (`bash a.sh` where a.sh runs b.sh …) are followed this deep.
MAX_SCRIPT_DEPTH = 8

# Pseudo-files that are never records.
_NOT_FILES = ("/dev", "/proc", "/sys")

# Locations that hold the system, not the agent's work (spec §2), plus Harbor's verifier-owned /tests and /logs:
# a path the verifier source mentions there is not an agent-writable record.
_SYSTEM_PREFIXES = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/opt", "/proc", "/sys", "/dev", "/tests", "/logs")

_PARSER = Parser(Language(tree_sitter_bash.language()))


class CommandEffects(TypedDict):
    """The record fields of one command entry of `trajectory.json` (docs/trajectory-schema.md)."""

    reads: list[str]
    stats: list[str]
    writes: list[dict[str, Any]]
    deletions: list[str]
    ports_bound: list[str]
    ports_connected: list[str]
    processes_started: list[dict[str, Any]]
    processes_killed: list[dict[str, Any]]
    processes_probed: list[dict[str, Any]]
    untraced_changes: list[str]


def empty_effects() -> CommandEffects:
    return CommandEffects(reads=[], stats=[], writes=[], deletions=[], ports_bound=[], ports_connected=[],
                          processes_started=[], processes_killed=[], processes_probed=[], untraced_changes=[])


@dataclass(frozen=True)
class FileVersion:
    """What the simulation knows about a path: existence, content when known, and a content hash."""

    exists: bool
    content: str | None = None  # None: a directory, or content the text does not reveal
    hash: str | None = None  # "sha256:…", "dir", or "unknown:…"; None when the path is missing
    is_dir: bool = False


MISSING = FileVersion(exists=False)
DIRECTORY = FileVersion(exists=True, hash="dir", is_dir=True)


@dataclass
class _Process:
    name: str
    owner: int  # index of the command that started it
    command_text: str  # for `pkill -f PATTERN`
    ports: list[str]


def _content_hash(content: str) -> str:
    return "sha256:" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def _lines(content: str) -> list[str]:
    lines = content.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _is_line_tracked(content: str) -> bool:
    return len(content.encode("utf-8", "surrogatepass")) <= TEXT_MAX_BYTES and content.count("\n") <= TEXT_MAX_LINES


def _changed_lines(before: list[str], after: list[str]) -> list[str]:
    """The inserted or replaced lines of a line diff: what an edit (rather than a rewrite) wrote."""
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    return [line for tag, _, _, start, end in matcher.get_opcodes() if tag in ("insert", "replace")
            for line in after[start:end]]


def _is_under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# ----------------------------------------------------------------------------------------------------------------
# Escapes, echo and printf

_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|0[0-7]{0,3}|[1-7][0-7]{0,2}|.)", re.DOTALL)
_NAMED_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
                  "\\": "\\", "'": "'", '"': '"'}


def _interpret_escapes(text: str) -> str:
    """Backslash escapes as `echo -e`, `printf` and `$'…'` read them."""

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "x":
            return chr(int(code[1:], 16))
        if code[0].isdigit():
            return chr(int(code, 8) & 0xFF)
        return _NAMED_ESCAPES.get(code, "\\" + code)

    return _ESCAPE.sub(replace, text)


def _echo(args: list[str | None]) -> str | None:
    newline, escapes = True, False
    while args and args[0] is not None and re.fullmatch(r"-[neE]+", args[0]):
        for letter in args[0][1:]:  # -n: no newline; -e / -E: escapes on / off, the last one wins
            newline = newline and letter != "n"
            escapes = {"e": True, "E": False}.get(letter, escapes)
        args = args[1:]
    if any(arg is None for arg in args):
        return None
    text = " ".join(args)  # type: ignore[arg-type]
    return (_interpret_escapes(text) if escapes else text) + ("\n" if newline else "")


_PRINTF_DIRECTIVE = re.compile(r"%([-+ #0]*)(\d*)(?:\.(\d+))?([sbdiouxXcfeEgG%])")


def _printf(fmt: str, args: list[str | None]) -> str | None:
    """bash `printf`: the format is reused until the arguments run out; None when any part is not literal."""
    if any(arg is None for arg in args):
        return None
    remaining: list[str] = list(args)  # type: ignore[arg-type]
    out: list[str] = []
    while True:
        position, consumed = 0, False
        for directive in _PRINTF_DIRECTIVE.finditer(fmt):
            out.append(_interpret_escapes(fmt[position:directive.start()]))
            position = directive.end()
            flags, width, precision, conversion = directive.groups()
            if conversion == "%":
                out.append("%")
                continue
            consumed = consumed or bool(remaining)
            value = remaining.pop(0) if remaining else ""
            spec = "%" + flags + width + (f".{precision}" if precision else "")
            try:
                if conversion in "sb":
                    out.append((spec + "s") % (_interpret_escapes(value) if conversion == "b" else value))
                elif conversion == "c":
                    out.append(value[:1])
                elif conversion in "feEgG":
                    out.append((spec + conversion) % float(value or 0))
                else:
                    out.append((spec + ("d" if conversion in "iu" else conversion)) % int(value or 0, 0))
            except ValueError:
                return None
        out.append(_interpret_escapes(fmt[position:]))
        if not remaining or not consumed:
            return "".join(out)


# ----------------------------------------------------------------------------------------------------------------
# Command-line conventions

@dataclass
class _Args:
    flags: set[str]  # short letters ("r", "f") and long names ("--recursive")
    values: dict[str, str | None]  # options that take a value: "-n" -> "5"
    operands: list[str | None]  # None: an argument the text does not determine


def _parse_args(args: list[str | None], value_options: Iterable[str] = ()) -> _Args:
    value_options = set(value_options)
    parsed = _Args(set(), {}, [])
    words = iter(args)
    for arg in words:
        if arg is None or arg == "-" or not arg.startswith("-"):
            parsed.operands.append(arg)
        elif arg == "--":
            parsed.operands.extend(words)
        elif arg.startswith("--"):
            name, has_value, value = arg.partition("=")
            if has_value:
                parsed.values[name] = value
            elif name in value_options:
                parsed.values[name] = next(words, None)
            else:
                parsed.flags.add(name)
        else:
            for position, letter in enumerate(arg[1:], start=1):
                if "-" + letter in value_options:
                    parsed.values["-" + letter] = arg[position + 1:] or next(words, None)
                    break
                parsed.flags.add(letter)
    return parsed


# Commands that only read their file operands (value: options that take a value, so it is not an operand).
_READERS: dict[str, set[str]] = {
    "head": {"-n", "-c"}, "tail": {"-n", "-c", "-s"}, "less": set(), "more": set(), "wc": set(), "tac": set(),
    "sort": {"-k", "-t", "-o", "-S", "-T", "--key", "--field-separator", "--output"}, "uniq": {"-f", "-s", "-w"},
    "diff": {"-U", "-C"}, "cmp": set(), "comm": set(), "nl": set(), "od": {"-t", "-N", "-j"}, "xxd": {"-l", "-s"},
    "hexdump": {"-n", "-s"}, "strings": {"-n"}, "base64": set(), "cut": {"-d", "-f", "-c", "-b"},
    "paste": {"-d"}, "column": {"-s", "-t"}, "file": set(), "md5sum": set(), "sha1sum": set(),
    "sha256sum": set(), "iconv": {"-f", "-t"},
}
# Commands that inspect paths without reading them (existence checks).
_INSPECTORS: dict[str, set[str]] = {
    "ls": {"-I", "--ignore", "-w", "--width", "-T"}, "stat": {"-c", "--format", "--printf"},
    "du": {"-d", "--max-depth", "-B"}, "tree": {"-I", "-L", "-P"}, "realpath": set(), "readlink": set(),
}
# Commands whose first operand is a pattern or program, not a file, unless an option supplies it.
_PATTERN_FIRST: dict[str, tuple[set[str], set[str]]] = {  # name -> (options with a value, options giving the pattern)
    "grep": ({"-e", "-f", "-A", "-B", "-C", "-m", "--regexp", "--file"}, {"-e", "-f", "--regexp", "--file"}),
    "egrep": ({"-e", "-f", "-A", "-B", "-C", "-m"}, {"-e", "-f"}),
    "fgrep": ({"-e", "-f", "-A", "-B", "-C", "-m"}, {"-e", "-f"}),
    "rg": ({"-e", "-f", "-A", "-B", "-C", "-m", "-g", "-t", "--glob", "--type"}, {"-e", "-f", "--regexp"}),
    "awk": ({"-F", "-v", "-f"}, {"-f"}), "gawk": ({"-F", "-v", "-f"}, {"-f"}),
    "sed": ({"-e", "-f", "--expression", "--file"}, {"-e", "-f", "--expression", "--file"}),
    "jq": ({"-f", "--arg", "--argjson", "--slurpfile", "--rawfile", "--indent"}, {"-f", "--from-file"}),
}
# Options of jq that take two values (`--arg name value`): the second is not an operand either.
_JQ_TWO_VALUE_OPTIONS = {"--arg", "--argjson", "--slurpfile", "--rawfile"}
_FILE_TEST_OPERATORS = {"-e", "-f", "-d", "-s", "-r", "-w", "-x", "-L", "-h", "-p", "-S", "-b", "-c", "-a"}

# Interpreters that run a script file: options whose value is inline code (so no script file), and options that
# take some other value.
_INTERPRETERS: dict[str, tuple[set[str], set[str]]] = {
    "python": ({"-c", "-m"}, {"-W", "-X"}), "Rscript": ({"-e"}, set()), "R": ({"-e"}, set()),
    "node": ({"-e", "-p", "--eval", "--print"}, {"-r", "--require"}), "ruby": ({"-e"}, {"-I", "-r"}),
    "perl": ({"-e", "-E"}, {"-I"}), "php": ({"-r"}, set()),
    "bash": ({"-c"}, {"-o", "-O"}), "sh": ({"-c"}, {"-o"}), "zsh": ({"-c"}, {"-o"}), "dash": ({"-c"}, {"-o"}),
}
_SHELLS = {"bash", "sh", "zsh", "dash"}
# Builtins run inside the shell: a `cd x && server &` statement starts `server`, not `cd`.
_BUILTINS = {"cd", "pushd", "echo", "printf", "test", "[", "source", ".", "true", "false", ":"}
_PYTHON = re.compile(r"python[\d.]*|pypy3?")

# Wrappers that run the rest of their arguments as a command: options that take a value, and how many leading
# operands are not part of the command (`timeout 10 cmd`).
_WRAPPERS: dict[str, tuple[set[str], int]] = {
    "sudo": ({"-u", "-g", "-C", "-D"}, 0), "nohup": (set(), 0), "time": (set(), 0), "command": (set(), 0),
    "exec": (set(), 0), "nice": ({"-n"}, 0), "stdbuf": ({"-i", "-o", "-e"}, 0),
    "timeout": ({"-s", "-k", "--signal", "--kill-after"}, 1), "env": ({"-u", "-C"}, 0),
}

_LOCAL_HOST = r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])"
_URL_PORT = re.compile(rf"(https?)://{_LOCAL_HOST}(?::(\d+))?")
# A server command names its port in one of these ways (`--port 8000`, `http.server 8080`, `0.0.0.0:5000`).
_SERVER_PORT = re.compile(
    rf"(?:--port[= ]|\s-p\s+|{_LOCAL_HOST}:|http\.server\s+|\bport=|\bPORT=)['\"]?(\d{{2,5}})\b")


def _named_port(match_text: str) -> str | None:
    return f"tcp:{match_text}" if 0 < int(match_text) < 65536 else None


# ----------------------------------------------------------------------------------------------------------------
# The simulator

class _Recorder:
    """Collects one command's records while the simulator runs it."""

    def __init__(self, index: int):
        self.index = index
        self.reads: dict[str, None] = {}  # dicts as ordered sets
        self.stats: dict[str, None] = {}
        self.before: dict[str, FileVersion | None] = {}  # each written or deleted path, before the command
        self.written: dict[str, None] = {}
        self.rewritten: set[str] = set()  # truncated at least once: lines_written is the whole new content
        self.deleted: dict[str, None] = {}
        self.ports_bound: dict[str, None] = {}
        self.ports_connected: dict[str, None] = {}
        self.started: list[dict[str, Any]] = []
        self.killed: list[dict[str, Any]] = []
        self.probed: list[dict[str, Any]] = []


# A command handler gets the command name (after wrappers), its argument values and its standard input, and
# returns its standard output when the text determines it.
_Handler = Callable[["ShellSimulator", str, list[str | None], "str | None"], "str | None"]
_HANDLERS: dict[str, _Handler] = {}


def _handles(*names: str) -> Callable[[_Handler], _Handler]:
    def register(handler: _Handler) -> _Handler:
        for name in names:
            _HANDLERS[name] = handler
        return handler

    return register


def _join_outputs(outputs: list[str | None]) -> str | None:
    return None if any(out is None for out in outputs) else "".join(outputs)  # type: ignore[arg-type]


class ShellSimulator:
    """One shell session: runs command texts in order and reports each command's records.

    Handlers return a command's standard output when the text determines it: "" for commands that print nothing
    on success (mkdir, rm, cp …), None when it is unknown (ls, grep, python3 …).

    Paths the trajectory has not touched yet are assumed absent when a command writes them, and assumed present
    with unknown content once a command reads them.
    """

    def __init__(self, workdir: str = DEFAULT_WORKDIR):
        self.cwd: str | None = posixpath.normpath(workdir)  # None after a `cd` the text does not determine
        self.files: dict[str, FileVersion] = {}
        self.processes: list[_Process] = []  # started by a command and still alive
        self._oldpwd: str | None = self.cwd
        self._variables: dict[str, str] = {"HOME": HOME}
        self._functions: dict[str, Node] = {}
        self._calling: set[str] = set()
        self._script_depth = 0
        self._background_text: str | None = None  # set while running a `… &` statement
        self._recorder = _Recorder(0)

    # --- public ---------------------------------------------------------------------------------------------------

    def run(self, text: str, index: int = 0) -> CommandEffects | None:
        """Simulate one command; None when its text does not parse, or nests deeper than this walk recurses."""
        tree = _PARSER.parse(text.encode("utf-8", "surrogatepass"))
        if tree.root_node.has_error:
            return None
        self._recorder = _Recorder(index)
        try:
            self._run(tree.root_node, None)
        except RecursionError:  # thousands of nested brackets: no agent writes that, garbage does
            return None
        return self._effects()

    def state_of(self, path: str) -> FileVersion:
        return self.files.get(path, MISSING)

    # --- tree walk ------------------------------------------------------------------------------------------------

    def _text(self, node: Node) -> str:
        return _decode(node.text or b"")

    def _run(self, node: Node, stdin: str | None) -> str | None:
        """Run a statement; returns its standard output when the text determines it."""
        kind = node.type
        if kind == "command":
            return self._run_command(node, stdin)
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            redirects = node.children_by_field_name("redirect")
            if body is not None and body.type == "list":
                # tree-sitter-bash hangs `a && b > f` 's redirections on the whole list; bash binds them to b.
                *earlier, last = body.named_children
                outputs = [self._run(child, None) for child in earlier]
                return _join_outputs(outputs + [self._with_redirects(lambda s: self._run(last, s), redirects, stdin)])
            run_body = (lambda s: self._run(body, s)) if body is not None else (lambda s: "")
            return self._with_redirects(run_body, redirects, stdin)
        if kind == "pipeline":
            return self._run_pipeline(node.named_children, stdin)
        if kind == "subshell":
            return self._isolated(lambda: self._run_sequence(node, stdin))
        if kind == "variable_assignment":
            self._assign(node)
            return ""
        if kind == "declaration_command":
            for child in node.named_children:
                if child.type == "variable_assignment":
                    self._assign(child)
            return ""
        if kind == "test_command":
            self._run_test(node)
            return ""
        if kind == "function_definition":
            name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
            if name is not None and body is not None:
                self._functions[self._text(name)] = body
            return ""
        if kind == "for_statement":
            variable = node.child_by_field_name("variable")
            if variable is not None:
                self._variables.pop(self._text(variable), None)  # its values are not followed one by one
            return self._run_sequence(node, stdin)
        if kind in ("program", "list", "compound_statement", "do_group", "if_statement", "elif_clause",
                    "else_clause", "while_statement", "negated_command", "case_statement", "case_item",
                    "c_style_for_statement"):
            return self._run_sequence(node, stdin)
        self._run_substitutions(node)  # words, conditions, arithmetic: only their `$(…)` run
        return None

    def _run_sequence(self, node: Node, stdin: str | None) -> str | None:
        outputs: list[str | None] = []
        for child in node.named_children:
            if child.type == "comment":
                continue
            sibling = child.next_sibling
            if sibling is not None and sibling.type == "&":
                self._background_text = self._text(child)
                self._run(child, None)
                self._background_text = None
            else:
                outputs.append(self._run(child, stdin))
        return _join_outputs(outputs)

    def _run_pipeline(self, stages: list[Node], stdin: str | None) -> str | None:
        stream = stdin
        for stage in stages:
            stream = self._isolated(partial(self._run, stage, stream))
        return stream

    def _isolated(self, run: Callable[[], str | None]) -> str | None:
        """Run in a subshell: directory, variables and functions changes stay inside."""
        saved = (self.cwd, self._oldpwd, dict(self._variables), dict(self._functions))
        try:
            return run()
        finally:
            self.cwd, self._oldpwd, self._variables, self._functions = saved

    def _run_substitutions(self, node: Node) -> None:
        """Run the `$(…)`, backquote and `<(…)` commands inside a word (each in a subshell)."""
        if node.type in ("command_substitution", "process_substitution"):
            self._isolated(lambda: self._run_sequence(node, None))
            return
        for child in node.named_children:
            self._run_substitutions(child)

    def _run_script(self, script: str) -> str | None:
        """Run shell text that a command hands to a shell (`bash -c`, `bash x.sh`, `bash <<EOF`)."""
        if self._script_depth >= MAX_SCRIPT_DEPTH:
            return None
        root = _PARSER.parse(script.encode("utf-8", "surrogatepass")).root_node
        if root.has_error:
            return None
        self._script_depth += 1
        try:
            return self._run_sequence(root, None)
        finally:
            self._script_depth -= 1

    # --- words ----------------------------------------------------------------------------------------------------

    def _value(self, node: Node) -> str | None:
        """The literal value of a shell word; None when it depends on something the text does not fix."""
        kind, text = node.type, self._text(node)
        if kind == "word":
            if re.search(r"(?<!\\)[*?]", text):
                return None  # a glob: expanded at run time
            if text.startswith("~") and (len(text) == 1 or text[1] == "/"):
                text = HOME + text[1:]
            return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)
        if kind == "number":
            return text
        if kind == "raw_string":
            return text[1:-1]
        if kind == "ansi_c_string":
            return _interpret_escapes(text[2:-1])
        if kind == "string":
            return self._expand(node, node.start_byte + 1, node.end_byte - 1, node, r"\\([$`\"\\\n])")
        if kind in ("simple_expansion", "expansion"):
            return self._variable(node)
        if kind == "concatenation":
            parts = [self._value(child) if child.is_named else self._text(child) for child in node.children]
            return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]
        return None

    def _variable(self, node: Node) -> str | None:
        names = node.named_children
        if len(names) != 1 or names[0].type != "variable_name":  # `${X:-d}`, `$@`, `$1`: not followed
            return None
        name = self._text(names[0])
        return self.cwd if name == "PWD" else self._variables.get(name)

    def _expand(self, owner: Node, start: int, end: int, parts_of: Node, escape: str) -> str | None:
        """The text of `owner` between two byte offsets with the `$X` expansions among the children of `parts_of`
        substituted, then the backslash escapes matching `escape` removed (double quotes, heredoc bodies)."""
        source, base = owner.text or b"", owner.start_byte
        parts: list[str] = []
        position = start
        for child in parts_of.named_children:
            if child.type not in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"):
                continue
            value = self._variable(child) if child.type in ("simple_expansion", "expansion") else None
            if value is None:
                return None
            parts += [_decode(source[position - base:child.start_byte - base]), value]
            position = child.end_byte
        parts.append(_decode(source[position - base:end - base]))
        literal = "".join(parts)
        return re.sub(escape, lambda m: "" if m.group(1) == "\n" else m.group(1), literal)

    def _path(self, value: str | None) -> str | None:
        if not value or value == "-":
            return None
        if value.startswith("/"):
            return posixpath.normpath(value)
        return posixpath.normpath(posixpath.join(self.cwd, value)) if self.cwd is not None else None

    def _assign(self, node: Node) -> None:
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is None:
            return
        if value is not None:
            self._run_substitutions(value)
        resolved = self._value(value) if value is not None else ""
        if resolved is None:
            self._variables.pop(self._text(name), None)
        else:
            self._variables[self._text(name)] = resolved

    # --- redirections ---------------------------------------------------------------------------------------------

    def _heredoc(self, node: Node) -> str | None:
        """The text a heredoc feeds to its command."""
        start_node = next((c for c in node.children if c.type == "heredoc_start"), None)
        end_node = next((c for c in node.children if c.type == "heredoc_end"), None)
        if start_node is None or end_node is None:
            return None
        # The body runs from the line after the `<<EOF` line to the line of the delimiter (offsets within `node`).
        source, base = node.text or b"", node.start_byte
        body_start = source.find(b"\n", start_node.end_byte - base) + 1
        body_end = max(source.rfind(b"\n", 0, end_node.start_byte - base) + 1, body_start)
        body_node = next((c for c in node.children if c.type == "heredoc_body"), None)
        if any(quote in self._text(start_node) for quote in "'\"\\") or body_node is None:
            content: str | None = _decode(source[body_start:body_end])  # quoted delimiter: the body is literal
        else:
            self._run_substitutions(body_node)
            content = self._expand(node, base + body_start, base + body_end, body_node, r"\\([$`\\\n])")
        if content is not None and any(c.type == "<<-" for c in node.children):
            content = re.sub(r"(?m)^\t+", "", content)
        return content

    def _with_redirects(self, run_body: Callable[[str | None], str | None], redirects: list[Node],
                        stdin: str | None) -> str | None:
        # tree-sitter-bash puts the rest of a heredoc's first line inside the heredoc node: more redirections,
        # a pipeline the output flows into, and `&& next` commands.
        flat: list[Node] = []
        pipeline_tail: Node | None = None
        continuations: list[Node] = []
        for redirect in redirects:
            flat.append(redirect)
            if redirect.type == "heredoc_redirect":
                for index, child in enumerate(redirect.children):
                    if child.type in ("file_redirect", "herestring_redirect"):
                        flat.append(child)
                    elif child.type == "pipeline":
                        pipeline_tail = child
                    elif redirect.field_name_for_child(index) == "right":
                        continuations.append(child)

        outputs: list[tuple[str, str | None, bool]] = []  # (stream: "out" | "err" | "both", path, append)
        for redirect in flat:
            if redirect.type == "heredoc_redirect":
                stdin = self._heredoc(redirect)
            elif redirect.type == "herestring_redirect":
                words = redirect.named_children
                for word in words:
                    self._run_substitutions(word)
                value = self._value(words[0]) if words else None
                stdin = value + "\n" if value is not None else None
            elif redirect.type == "file_redirect":
                destination = redirect.child_by_field_name("destination")
                descriptor = redirect.child_by_field_name("descriptor")
                operator = next((c.type for c in redirect.children if not c.is_named), "")
                if destination is None:
                    continue
                self._run_substitutions(destination)
                target = self._value(destination)
                if operator in (">&", "<&") and (target is None or target == "-" or target.isdigit()):
                    continue  # `2>&1`: duplicates a descriptor, opens no file
                path = self._path(target)
                if operator == "<":
                    stdin = self._read(path)
                elif operator in (">", ">|", ">>", "&>", "&>>", ">&"):
                    fd = self._text(descriptor) if descriptor is not None else "1"
                    stream = "both" if operator.startswith("&") or operator == ">&" else "out" if fd == "1" else "err"
                    outputs.append((stream, path, operator.endswith(">>")))

        stdout = run_body(stdin)

        last_stdout_target = max((i for i, (stream, _, _) in enumerate(outputs) if stream != "err"), default=-1)
        for position, (stream, path, append) in enumerate(outputs):
            # Only the last redirection of standard output receives it; earlier ones are merely truncated.
            # Standard error is not known (commands with known output write none on success).
            content = stdout if position == last_stdout_target else ("" if stream != "err" else None)
            self._write(path, content, append=append)
        result = "" if last_stdout_target >= 0 else stdout

        if pipeline_tail is not None:
            result = self._run_pipeline(pipeline_tail.named_children, result)
        return _join_outputs([result] + [self._run(node, None) for node in continuations])

    # --- commands -------------------------------------------------------------------------------------------------

    def _run_command(self, node: Node, stdin: str | None) -> str | None:
        name_node = node.child_by_field_name("name")
        arguments = node.children_by_field_name("argument")
        for child in arguments + [c for c in node.children if c.type == "variable_assignment"]:
            self._run_substitutions(child)  # `X=v cmd` sets X for cmd only: nothing to remember

        def invoke(command_stdin: str | None) -> str | None:
            if name_node is None:
                return ""
            self._run_substitutions(name_node)
            name_word = name_node.named_children[0] if name_node.named_children else name_node
            return self._dispatch(self._value(name_word), [self._value(arg) for arg in arguments], command_stdin)

        redirects = node.children_by_field_name("redirect")
        return self._with_redirects(invoke, redirects, stdin) if redirects else invoke(stdin)

    def _dispatch(self, name: str | None, args: list[str | None], stdin: str | None) -> str | None:
        if name is None:
            return None
        if name in self._functions and name not in self._calling:
            self._calling.add(name)
            try:
                return self._run(self._functions[name], stdin)
            finally:
                self._calling.discard(name)
        base = posixpath.basename(name)
        if base in _WRAPPERS:
            value_options, skipped = _WRAPPERS[base]
            rest = list(args)
            while rest and rest[0] is not None and (rest[0].startswith("-") or (base == "env" and "=" in rest[0])):
                option = rest.pop(0)
                if option in value_options and rest:
                    rest.pop(0)
            rest = rest[skipped:]
            return self._dispatch(rest[0], rest[1:], stdin) if rest else None
        if self._background_text is not None and base not in _BUILTINS:
            self._start_process(base)
        if "/" in name:
            return self._execute_file(self._path(name), stdin)
        handler = _HANDLERS.get(base)
        if handler is not None:
            return handler(self, base, args, stdin)
        interpreter = "python" if _PYTHON.fullmatch(base) else base
        if interpreter in _INTERPRETERS:
            return self._interpret(interpreter, args, stdin)
        return None

    def _execute_file(self, path: str | None, stdin: str | None) -> str | None:
        """`./run.sh`: the file is read (executed); a shell script whose text is known is followed."""
        script = self._read(path)
        if script is None:
            return None
        shebang = script.split("\n", 1)[0][2:].split() if script.startswith("#!") else ["sh"]
        if any(posixpath.basename(word) in _SHELLS for word in shebang):
            return self._isolated(lambda: self._run_script(script))
        return None

    def _interpret(self, interpreter: str, args: list[str | None], stdin: str | None) -> str | None:
        inline_options, value_options = _INTERPRETERS[interpreter]
        words = iter(args)
        for arg in words:
            if arg is None:
                return None  # a script name the text does not fix
            shell_code_option = interpreter in _SHELLS and re.fullmatch(r"-[a-z]*c[a-z]*", arg)
            if arg in inline_options or shell_code_option:  # `bash -lc CODE` bundles -c with other flags
                code = next(words, None)
                if shell_code_option and code is not None:
                    return self._isolated(lambda: self._run_script(code))
                return None
            if arg in value_options:
                next(words, None)
            elif arg == "-":
                break  # the script comes on standard input
            elif not arg.startswith("-"):
                script = self._read(self._path(arg))
                if interpreter in _SHELLS and script is not None:
                    return self._isolated(lambda: self._run_script(script))
                return None
        if interpreter in _SHELLS and stdin is not None:
            return self._isolated(lambda: self._run_script(stdin))
        return None

    def _run_test(self, node: Node) -> None:
        """`[ -f x ]`, `[[ -d y && -s z ]]`: file tests are existence checks."""
        self._run_substitutions(node)
        for expression in _descendants(node, "unary_expression"):
            operator = expression.child_by_field_name("operator")
            operand = expression.named_children[-1] if expression.named_children else None
            if operator is not None and operand is not None and self._text(operator) in _FILE_TEST_OPERATORS:
                self._stat(self._path(self._value(operand)))

    # --- processes ------------------------------------------------------------------------------------------------

    def _start_process(self, name: str) -> None:
        text = self._background_text or ""
        self._background_text = None  # only the statement's first command is the started process
        ports = list(dict.fromkeys(p for m in _SERVER_PORT.finditer(text) if (p := _named_port(m.group(1)))))
        if name.startswith("python") and "http.server" in text and not ports:
            ports = ["tcp:8000"]  # http.server's default
        self.processes.append(_Process(name, self._recorder.index, text, ports))
        self._recorder.started.append({"pid": None, "name": name, "alive_after": True})
        self._recorder.ports_bound.update(dict.fromkeys(ports))

    def _matching_processes(self, pattern: str | None, full_command: bool) -> list[_Process]:
        if pattern is None:
            return []
        return [p for p in self.processes if (pattern in p.command_text if full_command else p.name == pattern)]

    # --- file operations ------------------------------------------------------------------------------------------

    @staticmethod
    def _is_real_file(path: str | None) -> bool:
        return path is not None and not any(_is_under(path, prefix) for prefix in _NOT_FILES)

    def _read(self, path: str | None) -> str | None:
        """Record a read; returns the content when the simulation knows it."""
        if path is None or not self._is_real_file(path):
            return None
        self._recorder.reads[path] = None
        version = self.files.get(path)
        if version is None:  # never touched: it must exist already, with content we do not know
            self.files[path] = FileVersion(exists=True, hash=f"unknown:initial:{path}")
            return None
        return version.content

    def _stat(self, path: str | None) -> None:
        if path is not None and self._is_real_file(path):
            self._recorder.stats[path] = None

    def _remember_before(self, path: str) -> None:
        self._recorder.before.setdefault(path, self.files.get(path))

    def _know_parents(self, path: str) -> None:
        """A path that gets written lies in directories: remember them (not as writes: they may have existed)."""
        parent = posixpath.dirname(path)
        while parent != "/" and not self.state_of(parent).is_dir:
            self.files[parent] = DIRECTORY
            parent = posixpath.dirname(parent)

    def _write(self, path: str | None, content: str | None, append: bool = False,
               known_hash: str | None = None) -> None:
        """Write `content` (None: unknown) to a file; cp and mv pass the source's hash, known even when its content
        is not."""
        if path is None or not self._is_real_file(path):
            return
        self._remember_before(path)
        self._know_parents(path)
        current = self.files.get(path, MISSING)
        if append and current.exists:
            content = current.content + content if current.content is not None and content is not None else None
        else:
            self._recorder.rewritten.add(path)
        if known_hash is None:
            known_hash = _content_hash(content) if content is not None else f"unknown:{self._recorder.index}"
        self.files[path] = FileVersion(exists=True, content=content, hash=known_hash)
        self._recorder.written[path] = None

    def _make_dir(self, path: str | None) -> None:
        if path is None or not self._is_real_file(path) or self.state_of(path).exists:
            return
        self._remember_before(path)
        self._know_parents(path)
        self.files[path] = DIRECTORY
        self._recorder.written[path] = None

    def _descendants(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return [p for p, v in self.files.items() if p.startswith(prefix) and v.exists]

    def _delete(self, path: str | None, recursive: bool) -> None:
        if path is None or not self._is_real_file(path):
            return
        version = self.files.get(path)
        if version is not None and (not version.exists or (version.is_dir and not recursive)):
            return  # already gone, or a directory `rm` without -r refuses
        for doomed in [*self._descendants(path), path]:
            self._remember_before(doomed)
            self.files[doomed] = MISSING
            self._recorder.deleted[doomed] = None

    def _transfer(self, source: str, target: str, move: bool) -> None:
        """cp / mv of a file, or of a directory with what the simulation knows it holds."""
        pairs = [(source, target)] + [(inner, target + inner[len(source):]) for inner in self._descendants(source)]
        for origin, copy in pairs:
            if self.state_of(origin).is_dir:
                self._stat(origin)  # a directory is listed, not read
                self._make_dir(copy)
                continue
            content = self._read(origin)
            version = self.state_of(origin)
            if version.exists:  # not deleted earlier, nor a pseudo-file such as /dev/null
                self._write(copy, content, known_hash=version.hash)
        if move:
            self._delete(source, recursive=True)

    # --- the command's records ------------------------------------------------------------------------------------

    def _effects(self) -> CommandEffects:
        recorder = self._recorder
        effects = empty_effects()
        effects["reads"] = list(recorder.reads)
        effects["stats"] = list(recorder.stats)
        for path, before in recorder.before.items():
            after = self.state_of(path)
            existed = before is not None and before.exists
            # An untouched path that the command itself created and removed was a temporary file, not a deletion.
            existed_or_unknown = existed or (before is None and path not in recorder.written)
            if path in recorder.deleted and existed_or_unknown:
                effects["deletions"].append(path)
            if path in recorder.written and after.exists:
                effects["writes"].append(self._write_record(path, before, after, recorder))
        effects["ports_bound"] = list(recorder.ports_bound)
        effects["ports_connected"] = list(recorder.ports_connected)
        effects["processes_started"] = recorder.started
        effects["processes_killed"] = recorder.killed
        effects["processes_probed"] = recorder.probed
        return effects

    @staticmethod
    def _write_record(path: str, before: FileVersion | None, after: FileVersion, recorder: _Recorder) -> dict:
        created = before is None or not before.exists or path in recorder.deleted
        if after.content is None or not _is_line_tracked(after.content):
            return {"path": path, "created": created, "text": False, "lines_written": [], "content_after": None,
                    "hash_after": after.hash}
        content_after = _lines(after.content)
        if created or path in recorder.rewritten or before is None or before.content is None:
            lines_written = content_after  # a full rewrite writes every line
        else:
            lines_written = _changed_lines(_lines(before.content), content_after)
        return {"path": path, "created": created, "text": True, "lines_written": lines_written,
                "content_after": content_after, "hash_after": after.hash}

    # --- command handlers -----------------------------------------------------------------------------------------

    @_handles("cd", "pushd")
    def _cd(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        operands = _parse_args(args).operands
        target = operands[0] if operands else HOME
        if target == "-":
            self.cwd, self._oldpwd = self._oldpwd, self.cwd
        else:
            self.cwd, self._oldpwd = self._path(target), self.cwd
        return ""

    @_handles("echo")
    def _echo(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        return _echo(args)

    @_handles("printf")
    def _printf(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args, {"-v"})
        if "-v" in parsed.values:  # `printf -v NAME …` assigns a variable instead of printing
            self._variables.pop(parsed.values["-v"] or "", None)
            return ""
        if not parsed.operands or parsed.operands[0] is None:
            return None
        return _printf(parsed.operands[0], parsed.operands[1:])

    @_handles("cat")
    def _cat(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args)
        if not parsed.operands:
            return stdin if not parsed.flags else None
        parts = [stdin if operand == "-" else self._read(self._path(operand)) for operand in parsed.operands]
        return _join_outputs(parts) if not parsed.flags else None  # -n, -A … change the output

    @_handles("tee")
    def _tee(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args)
        for operand in parsed.operands:
            self._write(self._path(operand), stdin, append=bool({"a", "--append"} & parsed.flags))
        return stdin

    @_handles(*_READERS)
    def _read_operands(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args, _READERS[name])
        for operand in parsed.operands:
            self._read(self._path(operand))
        for option in ("-o", "--output"):  # `sort -o FILE` writes its (unknown) output there
            if name == "sort" and option in parsed.values:
                self._write(self._path(parsed.values[option]), None)
        return None

    @_handles(*_PATTERN_FIRST)
    def _read_after_pattern(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        value_options, pattern_options = _PATTERN_FIRST[name]
        if name == "jq":  # `--arg NAME VALUE`: drop NAME so that VALUE is read as the option's value
            args = [a for i, a in enumerate(args) if i == 0 or args[i - 1] not in _JQ_TWO_VALUE_OPTIONS]
        parsed = _parse_args(args, value_options)
        given_patterns = pattern_options & set(parsed.values)
        files = parsed.operands if given_patterns else parsed.operands[1:]
        for option in given_patterns & {"-f", "--file", "--from-file"}:
            self._read(self._path(parsed.values[option]))
        in_place = name == "sed" and any(
            a is not None and (re.match(r"-[A-Za-z]*i", a) or a.startswith("--in-place")) for a in args)
        for operand in files:
            path = self._path(operand)
            self._read(path)
            if in_place:
                self._write(path, None)
        return None

    @_handles(*_INSPECTORS)
    def _inspect(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        operands = _parse_args(args, _INSPECTORS[name]).operands
        for operand in operands or ["."]:
            self._stat(self._path(operand))
        return None

    @_handles("find")
    def _find(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        # Start points come before the first expression word (`-name`, `(`, `!`).
        for arg in args:
            if arg is None or arg.startswith("-") or arg in ("(", "!"):
                break
            self._stat(self._path(arg))
        return None

    @_handles("test", "[")
    def _test(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        for operator, operand in zip(args, args[1:]):
            if operator in _FILE_TEST_OPERATORS and operand not in _FILE_TEST_OPERATORS:
                self._stat(self._path(operand))
        return ""

    @_handles("touch")
    def _touch(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        for operand in _parse_args(args, {"-d", "-t", "-r"}).operands:
            path = self._path(operand)
            if path is not None and not self.state_of(path).exists:
                self._write(path, "")  # an existing file only gets new timestamps
        return ""

    @_handles("mkdir")
    def _mkdir(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        for operand in _parse_args(args, {"-m", "--mode"}).operands:
            self._make_dir(self._path(operand))
        return ""

    @_handles("rm", "rmdir", "unlink")
    def _rm(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args)
        recursive = name == "rmdir" or bool({"r", "R", "--recursive", "d", "--dir"} & parsed.flags)
        for operand in parsed.operands:
            self._delete(self._path(operand), recursive=recursive)
        return ""

    @_handles("cp", "mv")
    def _cp_mv(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args, {"-t", "--target-directory", "-S", "--suffix"})
        operands = parsed.operands
        directory = parsed.values.get("-t") or parsed.values.get("--target-directory")
        if directory is None:
            if len(operands) < 2 or operands[-1] is None:
                return None
            directory, operands = operands[-1], operands[:-1]
            into = len(operands) > 1 or directory.endswith("/") or self.state_of(self._path(directory) or "").is_dir
        else:
            into = True
        destination = self._path(directory)
        for operand in operands:
            source = self._path(operand)
            if source is None or destination is None:
                continue
            self._transfer(source, posixpath.join(destination, posixpath.basename(source)) if into else destination,
                           move=name == "mv")
        return ""

    @_handles("source", ".")
    def _source_file(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        operands = _parse_args(args).operands
        script = self._read(self._path(operands[0])) if operands else None
        return self._run_script(script) if script is not None else None  # runs in this shell: cd persists

    @_handles("kill", "pkill", "killall")
    def _kill(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        if name == "kill":
            return ""  # `kill PID` / `kill %1` name no process the text can follow
        parsed = _parse_args(args, {"-s", "--signal", "-u", "-U", "-g", "-P"})
        for pattern in parsed.operands:
            for process in self._matching_processes(pattern, full_command="f" in parsed.flags):
                self.processes.remove(process)
                self._recorder.killed.append({"pid": None, "name": process.name, "owner": process.owner})
        return ""

    @_handles("ps", "pgrep", "pidof")
    def _probe(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        parsed = _parse_args(args, {"-u", "-U", "-g", "-P", "-o", "-p"})
        if name == "ps":
            probed = self.processes
        else:
            probed = [p for pattern in parsed.operands for p in self._matching_processes(pattern, "f" in parsed.flags)]
        self._recorder.probed += [{"pid": None, "name": p.name, "owner": p.owner} for p in probed]
        return None

    @_handles("curl", "wget")
    def _fetch_url(self, name: str, args: list[str | None], stdin: str | None) -> str | None:
        output_options = {"-o", "--output"} if name == "curl" else {"-O", "--output-document"}
        parsed = _parse_args(args, output_options | {"-H", "-d", "-X", "-u", "-A", "--data", "--header", "-w"})
        for operand in parsed.operands:
            match = _URL_PORT.match(operand or "")
            if match:
                port = match.group(2) or (443 if match.group(1) == "https" else 80)
                self._recorder.ports_connected[f"tcp:{port}"] = None
        for option in output_options & set(parsed.values):
            self._write(self._path(parsed.values[option]), None)
        return None


def _descendants(node: Node, kind: str) -> list[Node]:
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == kind:
            found.append(current)
        stack.extend(reversed(current.named_children))  # pre-order: in the order they appear in the text
    return found


# ----------------------------------------------------------------------------------------------------------------
# One command, and a whole trajectory

def infer_command_effects(text: str, cwd: str = DEFAULT_WORKDIR) -> tuple[CommandEffects, str | None]:
    """Records of one command run in a fresh shell at `cwd`, and the directory it leaves (None: not determined)."""
    shell = ShellSimulator(cwd)
    effects = shell.run(text)
    return (effects if effects is not None else empty_effects()), shell.cwd


# A path token: starts with "/" that is not part of a URL, word or relative path. `{…}` (f-string fields) become
# wildcards. Trailing sentence punctuation is stripped afterwards.
_PATH_TOKEN = re.compile(r"(?<![\w.:/~$-])/[\w.@+*?\[\]{}-]+(?:/[\w.@+*?\[\]{}-]*)*")
_PORT_TOKEN = re.compile(rf"{_LOCAL_HOST}:(\d{{2,5}})\b|(?<![a-z])port(?![a-z])['\"]?\s*[=:]?\s*['\"]?(\d{{2,5}})\b",
                         re.IGNORECASE)  # `localhost:8080`, `port=8080`, `server_port = 8080`, "on port 8080"


def extract_verifier_records(text: str, workdir: str = DEFAULT_WORKDIR) -> list[str]:
    """The paper's extraction rules for E: absolute paths (globs kept as globs) and local ports named in `text`
    (a verifier's source, or failing that the task instruction). System locations and the workdir itself are
    left out: they hold no record the agent makes."""
    records: dict[str, None] = {}
    for match in _PATH_TOKEN.finditer(text):
        token = re.sub(r"\{[^}/]*\}", "*", match.group(0)).rstrip(".,;:)]}")
        path = posixpath.normpath(token)
        if path not in ("/", posixpath.normpath(workdir)) and not any(_is_under(path, p) for p in _SYSTEM_PREFIXES):
            records[path] = None
    for match in _PORT_TOKEN.finditer(text):
        port = _named_port(match.group(1) or match.group(2))
        if port is not None:
            records[port] = None
    return list(records)


def _glob_free_prefix(record: str) -> str:
    wildcard = re.search(r"[*?\[]", record)
    return posixpath.dirname(record[:wildcard.start()]) if wildcard else posixpath.dirname(record)


def _is_path_record(record: str) -> bool:
    return record.startswith("/")


def infer_trajectory(steps: Iterable[Mapping[str, Any]], *, instruction: str = "", workdir: str = DEFAULT_WORKDIR,
                     tracked_roots: list[str] | None = None, verifier_source: str | None = None,
                     verifier: Mapping[str, Any] | None = None, task: Mapping[str, Any] | None = None,
                     num_turns: int | None = None) -> dict[str, Any]:
    """A `trajectory.json` dict (`source: "static"`) whose records are inferred from the command texts.

    `steps` are the executed commands in order, each a mapping with `text` and optionally `turn` (default: its
    position), `observation`, `exit_code`, `timed_out` and `duration_s`. `verifier` keeps an existing verifier
    section (its E) as is; otherwise E comes from `verifier_source`, else from the instruction. File records
    outside `tracked_roots` (default: the workdir and the directories of E's paths) are dropped.
    """
    started = time.perf_counter()
    if verifier is None:
        evidence = extract_verifier_records(verifier_source if verifier_source is not None else instruction, workdir)
        verifier = {"E": evidence, "E_detail": [{"record": r, "how": "static"} for r in evidence],
                    "E_source": "static" if evidence else "none", "reward": None, "reward_source": None,
                    "tests": {}, "exit_code": None, "output": "", "duration_s": None, "error": None}
    evidence = list(verifier.get("E") or [])
    if tracked_roots is None:
        tracked_roots = list(dict.fromkeys([posixpath.normpath(workdir)]
                                           + [_glob_free_prefix(r) for r in evidence if _is_path_record(r)]))

    def in_scope(path: str) -> bool:
        return any(_is_under(path, root) for root in tracked_roots)

    shell = ShellSimulator(workdir)
    commands: list[dict[str, Any]] = []
    errors: list[str] = []
    touched: dict[str, None] = {}  # tracked paths written or deleted, for `final`
    for index, step in enumerate(steps):
        text = str(step.get("text") or "")
        effects = shell.run(text, index)
        if effects is None:
            errors.append(f"command {index}: its text does not parse as shell; no records inferred")
            effects = empty_effects()
        effects["reads"] = [p for p in effects["reads"] if in_scope(p)]
        effects["stats"] = [p for p in effects["stats"] if in_scope(p)]
        effects["writes"] = [w for w in effects["writes"] if in_scope(w["path"])]
        effects["deletions"] = [p for p in effects["deletions"] if in_scope(p)]
        touched.update(dict.fromkeys([w["path"] for w in effects["writes"]] + effects["deletions"]))
        commands.append({"index": index, "turn": step.get("turn", index), "text": text,
                         "observation": step.get("observation") or "", "exit_code": step.get("exit_code"),
                         "timed_out": bool(step.get("timed_out", False)), "duration_s": step.get("duration_s"),
                         **effects})

    final_files = {}
    for path in list(touched) + [r for r in evidence if _is_path_record(r) and not re.search(r"[*?\[]", r)]:
        version = shell.state_of(path)
        line_tracked = version.content is not None and _is_line_tracked(version.content)
        final_files[path] = {"exists": version.exists, "hash": version.hash,
                             "lines": _lines(version.content) if line_tracked else None}  # type: ignore[arg-type]
    parse_s = time.perf_counter() - started
    trajectory = {
        "schema_version": 1,
        "task": dict(task) if task is not None else {"id": None, "path": None, "format": None},
        "instruction": instruction,
        "workdir": workdir,
        "tracked_roots": tracked_roots,
        "source": "static",
        "commands": commands,
        "verifier": dict(verifier),
        "final": {
            "files": final_files,
            "alive_processes": [{"pid": None, "name": p.name, "owner": p.owner} for p in shell.processes],
            "listening_ports": [{"port": port, "owner": p.owner} for p in shell.processes for port in p.ports],
        },
        "timings": {"setup_s": None, "commands_s": None, "verifier_s": None, "parse_s": parse_s, "total_s": None},
        "errors": errors,
        "num_turns": num_turns if num_turns is not None else max((c["turn"] for c in commands), default=-1) + 1,
    }
    return trajectory
