"""Shell words as the command text fixes them: quoting, `$X` expansion, and what `echo` and `printf` print.

Each function answers "which literal string does this stand for", or None when the answer depends on the run
(a glob, a variable the text does not set, a `$(…)`). The simulator passes its variables in as `lookup`;
`simple_commands` reads a whole script (what `depgpo data check` asks of a task's scripts).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

HOME = "/root"  # `~` and a bare `cd`

Lookup = Callable[[str], str | None]  # a variable's value, None when the text does not fix it


def decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def join_outputs(outputs: list[str | None]) -> str | None:
    """The output of commands run one after the other; None when any part is unknown."""
    return None if any(out is None for out in outputs) else "".join(outputs)  # type: ignore[arg-type]


# ---- words -------------------------------------------------------------------------------------------------------

def word_value(node: Node, lookup: Lookup) -> str | None:
    """The literal value of a shell word; None when it depends on something the text does not fix."""
    kind, text = node.type, decode(node.text or b"")
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
        return interpret_escapes(text[2:-1])
    if kind == "string":
        return expand(node, node.start_byte + 1, node.end_byte - 1, node, r"\\([$`\"\\\n])", lookup)
    if kind in ("simple_expansion", "expansion"):
        return variable_value(node, lookup)
    if kind == "concatenation":
        parts = [word_value(child, lookup) if child.is_named else decode(child.text or b"") for child in node.children]
        return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]
    return None


def variable_value(node: Node, lookup: Lookup) -> str | None:
    """`$X` or `${X}`; `${X:-d}`, `$@` and `$1` are not followed."""
    names = node.named_children
    if len(names) != 1 or names[0].type != "variable_name":
        return None
    return lookup(decode(names[0].text or b""))


def expand(owner: Node, start: int, end: int, parts_of: Node, escape: str, lookup: Lookup) -> str | None:
    """The text of `owner` between two byte offsets with the `$X` expansions among the children of `parts_of`
    substituted, then the backslash escapes matching `escape` removed (double quotes, heredoc bodies)."""
    source, base = owner.text or b"", owner.start_byte
    parts: list[str] = []
    position = start
    for child in parts_of.named_children:
        if child.type not in ("simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"):
            continue
        value = variable_value(child, lookup) if child.type in ("simple_expansion", "expansion") else None
        if value is None:
            return None
        parts += [decode(source[position - base:child.start_byte - base]), value]
        position = child.end_byte
    parts.append(decode(source[position - base:end - base]))
    literal = "".join(parts)
    return re.sub(escape, lambda m: "" if m.group(1) == "\n" else m.group(1), literal)


# ---- escapes, echo and printf ------------------------------------------------------------------------------------

_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|0[0-7]{0,3}|[1-7][0-7]{0,2}|.)", re.DOTALL)
_NAMED_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
                  "\\": "\\", "'": "'", '"': '"'}


def interpret_escapes(text: str) -> str:
    """Backslash escapes as `echo -e`, `printf` and `$'…'` read them."""

    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "x":
            return chr(int(code[1:], 16))
        if code[0].isdigit():
            return chr(int(code, 8) & 0xFF)
        return _NAMED_ESCAPES.get(code, "\\" + code)

    return _ESCAPE.sub(replace, text)


def echo(args: list[str | None]) -> str | None:
    """What `echo ARGS` prints; None when any argument is not literal."""
    newline, escapes = True, False
    while args and args[0] is not None and re.fullmatch(r"-[neE]+", args[0]):
        for letter in args[0][1:]:  # -n: no newline; -e / -E: escapes on / off, the last one wins
            newline = newline and letter != "n"
            escapes = {"e": True, "E": False}.get(letter, escapes)
        args = args[1:]
    if any(arg is None for arg in args):
        return None
    text = " ".join(args)  # type: ignore[arg-type]
    return (interpret_escapes(text) if escapes else text) + ("\n" if newline else "")


_PRINTF_MAX_WIDTH = 4096
_PRINTF_DIRECTIVE = re.compile(r"%([-+ #0]*)(\d*)(?:\.(\d+))?([sbdiouxXcfeEgG%])")


def printf(fmt: str, args: list[str | None]) -> str | None:
    """bash `printf`: the format is reused until the arguments run out; None when any part is not literal."""
    if any(arg is None for arg in args):
        return None
    remaining: list[str] = list(args)  # type: ignore[arg-type]
    out: list[str] = []
    while True:
        position, consumed = 0, False
        for directive in _PRINTF_DIRECTIVE.finditer(fmt):
            out.append(interpret_escapes(fmt[position:directive.start()]))
            position = directive.end()
            flags, width, precision, conversion = directive.groups()
            if conversion == "%":
                out.append("%")
                continue
            consumed = consumed or bool(remaining)
            value = remaining.pop(0) if remaining else ""
            if int(width or 0) > _PRINTF_MAX_WIDTH or int(precision or 0) > _PRINTF_MAX_WIDTH:
                return None  # a padded field this wide is not content to track, and would cost its size in memory
            spec = "%" + flags + width + (f".{precision}" if precision else "")
            try:
                if conversion in "sb":
                    out.append((spec + "s") % (interpret_escapes(value) if conversion == "b" else value))
                elif conversion == "c":
                    out.append(value[:1])
                elif conversion in "feEgG":
                    out.append((spec + conversion) % float(value or 0))
                else:
                    # A missing argument is 0, as in bash.
                    out.append((spec + ("d" if conversion in "iu" else conversion)) % int(value or "0", 0))
            except (ValueError, OverflowError):
                return None
        out.append(interpret_escapes(fmt[position:]))
        if not remaining or not consumed:
            return "".join(out)


# ---- scripts -----------------------------------------------------------------------------------------------------

_PARSER = Parser(Language(tree_sitter_bash.language()))
_SHELLS = ("sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash")


def simple_commands(script: str) -> list[list[str | None]]:
    """The simple commands of `script` as bash reads it, each as its words (name, then arguments; None for a word
    the text does not fix): line continuations, quotes, pipes, `&&` and `;` lists, subshells, `$(...)` and
    functions are the parser's; variable assignments in front of a command and its redirections (`> /dev/null
    2>&1`) are not words; a heredoc body is data, unless a shell reads it as its script (`bash <<EOF`), as is
    `bash -c STRING`."""
    return [words for words, _ in _commands(script)]


def simple_command_texts(script: str) -> list[str]:
    """simple_commands as text for messages: the words joined by spaces, a word the text does not fix as written."""
    return [" ".join(word if word is not None else text for word, text in zip(words, texts))
            for words, texts in _commands(script)]


def _commands(script: str) -> list[tuple[list[str | None], list[str]]]:
    """(values, source texts) of each simple command's words, in order."""
    commands: list[tuple[list[str | None], list[str]]] = []
    stack = [_PARSER.parse(script.encode()).root_node]
    while stack:
        node = stack.pop()
        stack.extend(reversed(node.children))
        if node.type != "command":
            continue
        parts = [child.named_children[0] if child.type == "command_name" else child
                 for i, child in enumerate(node.children) if node.field_name_for_child(i) in ("name", "argument")]
        words = [word_value(part, _unknown) for part in parts]
        commands.append((words, [decode(part.text or b"") for part in parts]))
        if words and words[0] in _SHELLS:
            if "-c" in words[1:-1] and words[words.index("-c") + 1] is not None:
                commands += _commands(words[words.index("-c") + 1])  # type: ignore[arg-type]
            if node.parent is not None and node.parent.type == "redirected_statement":
                commands += [c for r in node.parent.children if r.type == "heredoc_redirect"
                             for body in r.children if body.type == "heredoc_body"
                             for c in _commands(decode(body.text or b""))]
    return commands


def _unknown(name: str) -> None:
    return None  # a script's variables are the run's


def fatal_commands(script: str) -> list[list[str | None]]:
    """The simple commands at the top level of `script` whose failure ends it, because `set -e` (or `-o errexit`,
    or `bash -e` on the first line) is in force there and bash does not exempt them: the last command of an `&&` or
    `||` list, the last of a pipeline (any of it under `pipefail`), not an `if` or `while` condition, and not
    inside a compound command or a function (which this reading does not follow)."""
    errexit = bool(re.match(r"#!\S*(?:\s+\S+)?\s+-\w*e", script))
    pipefail, fatal = False, []
    for statement in _PARSER.parse(script.encode()).root_node.named_children:
        words = _words_of(statement)
        if words and words[0] == "set":
            for i, flag in enumerate(words[1:], 1):
                if not flag or not re.fullmatch(r"[-+]\w+", flag):
                    continue
                if "e" in flag:
                    errexit = flag[0] == "-"
                if "o" in flag and i + 1 < len(words):  # -o NAME, and -euo NAME
                    errexit = errexit if words[i + 1] != "errexit" else flag[0] == "-"
                    pipefail = pipefail if words[i + 1] != "pipefail" else flag[0] == "-"
            continue
        if errexit:
            fatal += _fatal_in(statement, pipefail)
    return fatal


def _fatal_in(node: Node, pipefail: bool) -> list[list[str | None]]:
    if node.type == "redirected_statement":  # the parser hangs `a && b > f` on the list: b's failure still ends it
        body = node.child_by_field_name("body")
        return _fatal_in(body, pipefail) if body is not None else []
    if node.type == "command":
        words = _words_of(node)
        return [words] if words else []
    if node.type == "list":  # a && b, a || b: only the last one's failure ends the script
        return _fatal_in(node.named_children[-1], pipefail)
    if node.type == "pipeline":
        parts = node.named_children if pipefail else node.named_children[-1:]
        return [c for part in parts for c in _fatal_in(part, pipefail)]
    return []


def _words_of(node: Node) -> list[str | None]:
    """The words of a command, or of the command a redirected statement redirects."""
    if node.type == "redirected_statement":
        body = node.child_by_field_name("body")
        return _words_of(body) if body is not None else []
    if node.type != "command":
        return []
    return [word_value(child.named_children[0] if child.type == "command_name" else child, _unknown)
            for i, child in enumerate(node.children) if node.field_name_for_child(i) in ("name", "argument")]
