"""The shell simulator: one shell session that walks each command's tree-sitter-bash tree and keeps what a trace
would have told us.

It follows the working directory (`cd`, also inside `&&` chains; subshells, pipeline stages and `$(…)` do not leak
it), simple variables, shell functions, redirections, heredocs, pipes and background servers, and hands each
program to its handler (`inference.handlers`). The filesystem it keeps is `inference.filesystem`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from depgpo.inference.commands import BUILTINS, FILE_TEST_OPERATORS, WRAPPERS, server_ports, unwrap
from depgpo.inference.filesystem import Filesystem, SimulatedFile
from depgpo.inference.handlers import run_program
from depgpo.tasks.shell_words import HOME, decode, expand, join_outputs, word_value
from depgpo.trajectory.schema import CommandEffects, ProcessRecord, empty_effects

DEFAULT_WORKDIR = "/app"

# Scripts running scripts (`bash a.sh` where a.sh runs b.sh …) are followed this deep.
MAX_SCRIPT_DEPTH = 8

_PARSER = Parser(Language(tree_sitter_bash.language()))


@dataclass
class SimulatedProcess:
    """A process a command started in the background, as far as the text shows it."""

    name: str
    owner: int  # index of the command that started it
    command_text: str  # for `pkill -f PATTERN`
    ports: list[str]


@dataclass
class _ProcessRecords:
    """One command's port and process records, collected while it runs."""

    index: int
    ports_bound: dict[str, None] = field(default_factory=dict)  # dicts as ordered sets
    ports_connected: dict[str, None] = field(default_factory=dict)
    connected_first: set[str] = field(default_factory=set)  # connected to before this command's own server bound it
    started: list[ProcessRecord] = field(default_factory=list)
    killed: list[ProcessRecord] = field(default_factory=list)
    probed: list[ProcessRecord] = field(default_factory=list)


class ShellSimulator:
    """One shell session: runs command texts in order and reports each command's records.

    Statements return their standard output when the text determines it: "" for commands that print nothing on
    success (mkdir, rm, cp …), None when it is unknown (ls, grep, python3 …).
    """

    def __init__(self, workdir: str = DEFAULT_WORKDIR):
        self.cwd: str | None = posixpath.normpath(workdir)  # None after a `cd` the text does not determine
        self.oldpwd: str | None = self.cwd
        self.variables: dict[str, str] = {"HOME": HOME}
        self.fs = Filesystem()
        self.processes: list[SimulatedProcess] = []  # started by a command and still alive
        self._functions: dict[str, Node] = {}
        self._calling: set[str] = set()
        self._script_depth = 0
        self._background_text: str | None = None  # set while running a `… &` statement
        self._records = _ProcessRecords(0)

    def run(self, text: str, index: int = 0) -> CommandEffects | None:
        """Simulate one command; None when its text does not parse, or nests deeper than this walk recurses."""
        tree = _PARSER.parse(text.encode("utf-8", "surrogatepass"))
        if tree.root_node.has_error:
            return None
        self._records = _ProcessRecords(index)
        self.fs.start_command(index)
        try:
            self._run(tree.root_node, None)
        except RecursionError:  # thousands of nested brackets: no agent writes that, garbage does
            return None
        effects = empty_effects()
        self.fs.add_records(effects)
        effects["ports_bound"] = list(self._records.ports_bound)
        effects["ports_connected"] = list(self._records.ports_connected)
        effects["reads_after_write"] += [port for port in self._records.ports_connected
                                         if port not in self._records.connected_first]
        effects["processes_started"] = self._records.started
        effects["processes_killed"] = self._records.killed
        effects["processes_probed"] = self._records.probed
        return effects

    def state_of(self, path: str) -> SimulatedFile:
        return self.fs.state_of(path)

    # ---- for the handlers --------------------------------------------------------------------------------------

    def resolve(self, value: str | None) -> str | None:
        """The absolute path a word names; None when the text does not determine it (or for `-`)."""
        if not value or value == "-":
            return None
        if value.startswith("/"):
            return posixpath.normpath(value)
        return posixpath.normpath(posixpath.join(self.cwd, value)) if self.cwd is not None else None

    def run_script(self, script: str, subshell: bool = False) -> str | None:
        """Run shell text that a command hands to a shell (`bash -c`, `bash x.sh`, `bash <<EOF`, `source x.sh`)."""
        if subshell:
            return self._isolated(lambda: self.run_script(script))
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

    def matching_processes(self, pattern: str | None, full_command: bool) -> list[SimulatedProcess]:
        if pattern is None:
            return []
        return [p for p in self.processes if (pattern in p.command_text if full_command else p.name == pattern)]

    def kill(self, process: SimulatedProcess) -> None:
        self.processes.remove(process)
        self._records.killed.append({"pid": None, "name": process.name, "owner": process.owner})

    def probe(self, processes: list[SimulatedProcess]) -> None:
        self._records.probed += [{"pid": None, "name": p.name, "owner": p.owner} for p in processes]

    def connect(self, port: str) -> None:
        if port not in self._records.ports_bound:  # else it reached the server this command started
            self._records.connected_first.add(port)
        self._records.ports_connected[port] = None

    # ---- tree walk ---------------------------------------------------------------------------------------------

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
                return join_outputs(outputs + [self._with_redirects(lambda s: self._run(last, s), redirects, stdin)])
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
                self._functions[_text(name)] = body
            return ""
        if kind == "for_statement":
            variable = node.child_by_field_name("variable")
            if variable is not None:
                self.variables.pop(_text(variable), None)  # its values are not followed one by one
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
                self._background_text = _text(child)
                self._run(child, None)
                self._background_text = None
            else:
                outputs.append(self._run(child, stdin))
        return join_outputs(outputs)

    def _run_pipeline(self, stages: list[Node], stdin: str | None) -> str | None:
        stream = stdin
        for stage in stages:
            stream = self._isolated(partial(self._run, stage, stream))
        return stream

    def _isolated(self, run: Callable[[], str | None]) -> str | None:
        """Run in a subshell: directory, variables and functions changes stay inside."""
        saved = (self.cwd, self.oldpwd, dict(self.variables), dict(self._functions))
        try:
            return run()
        finally:
            self.cwd, self.oldpwd, self.variables, self._functions = saved

    def _run_substitutions(self, node: Node) -> None:
        """Run the `$(…)`, backquote and `<(…)` commands inside a word (each in a subshell)."""
        if node.type in ("command_substitution", "process_substitution"):
            self._isolated(lambda: self._run_sequence(node, None))
            return
        for child in node.named_children:
            self._run_substitutions(child)

    def _value(self, node: Node) -> str | None:
        return word_value(node, self._lookup)

    def _lookup(self, name: str) -> str | None:
        return self.cwd if name == "PWD" else self.variables.get(name)

    def _assign(self, node: Node) -> None:
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is None:
            return
        if value is not None:
            self._run_substitutions(value)
        resolved = self._value(value) if value is not None else ""
        if resolved is None:
            self.variables.pop(_text(name), None)
        else:
            self.variables[_text(name)] = resolved

    def _run_test(self, node: Node) -> None:
        """`[ -f x ]`, `[[ -d y && -s z ]]`: file tests are existence checks."""
        self._run_substitutions(node)
        for expression in _descendants(node, "unary_expression"):
            operator = expression.child_by_field_name("operator")
            operand = expression.named_children[-1] if expression.named_children else None
            if operator is not None and operand is not None and _text(operator) in FILE_TEST_OPERATORS:
                self.fs.stat(self.resolve(self._value(operand)))

    # ---- redirections ------------------------------------------------------------------------------------------

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
        if any(quote in _text(start_node) for quote in "'\"\\") or body_node is None:
            content: str | None = decode(source[body_start:body_end])  # quoted delimiter: the body is literal
        else:
            self._run_substitutions(body_node)
            content = expand(node, base + body_start, base + body_end, body_node, r"\\([$`\\\n])", self._lookup)
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
                path = self.resolve(target)
                if operator == "<":
                    stdin = self.fs.read(path)
                elif operator in (">", ">|", ">>", "&>", "&>>", ">&"):
                    fd = _text(descriptor) if descriptor is not None else "1"
                    stream = "both" if operator.startswith("&") or operator == ">&" else "out" if fd == "1" else "err"
                    outputs.append((stream, path, operator.endswith(">>")))

        stdout = run_body(stdin)

        last_stdout_target = max((i for i, (stream, _, _) in enumerate(outputs) if stream != "err"), default=-1)
        for position, (stream, path, append) in enumerate(outputs):
            # Only the last redirection of standard output receives it; earlier ones are merely truncated.
            # Standard error is not known (commands with known output write none on success).
            content = stdout if position == last_stdout_target else ("" if stream != "err" else None)
            self.fs.write(path, content, append=append)
        result = "" if last_stdout_target >= 0 else stdout

        if pipeline_tail is not None:
            result = self._run_pipeline(pipeline_tail.named_children, result)
        return join_outputs([result] + [self._run(node, None) for node in continuations])

    # ---- commands ----------------------------------------------------------------------------------------------

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
        if base in WRAPPERS:
            rest = unwrap(base, args)
            return self._dispatch(rest[0], rest[1:], stdin) if rest else None
        if self._background_text is not None and base not in BUILTINS:
            self._start_process(base)
        return run_program(self, name, args, stdin)

    def _start_process(self, name: str) -> None:
        text = self._background_text or ""
        self._background_text = None  # only the statement's first command is the started process
        ports = server_ports(name, text)
        self.processes.append(SimulatedProcess(name, self._records.index, text, ports))
        self._records.started.append({"pid": None, "name": name, "alive_after": True})
        self._records.ports_bound.update(dict.fromkeys(ports))


def _text(node: Node) -> str:
    return decode(node.text or b"")


def _descendants(node: Node, kind: str) -> list[Node]:
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == kind:
            found.append(current)
        stack.extend(reversed(current.named_children))  # pre-order: in the order they appear in the text
    return found
