"""The dependency-graph figure (the paper's Figures 1c, 3 and 4): one row per command, top to bottom in time, so that
it stays readable at any length (the figure grows by a row per command; only many records of E or many nested
edges make it wider).

Each row: the turn and its step factor f_t (number and bar), the command's index and first line, its role, q(c) and
its node (circle: write, diamond: read, coloured by q(c)). Right of the nodes, every edge of the graph runs down
from the earlier command to the later one in a lane of its own (data edges of G_E blue, other edges of G grey,
information edges dashed orange); right of those, the records of E as columns, a dot where a write reaches one
(green: it survives to the verifier, grey ring: it did not). Coordinates are inches, so that every text's place
is known before drawing and nothing is cut at the figure's edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from depgpo.credit.explain import short_command

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from depgpo.credit import CreditResult

GRAPH_FORMATS = (".png", ".svg")

FONT = 7.0  # points
# inches per character of DejaVu Sans Mono at FONT: 0.602 em, and 3% that rendering at the DPI adds
CHAR = 0.62 * FONT / 72
ROW = 0.24  # inches per command
COMMAND_CHARS = 64  # the first line of a command, up to this many characters (… marks a cut)
RECORD_CHARS = 48  # a record's name, shortened in the middle beyond this
LANE = 0.09  # inches between edge lanes
MAX_LANES_WIDTH = 3.0  # lanes get closer beyond this width
RECORD_COLUMN = 0.26  # inches per record of E
DPI = 150
MAX_EDGES = 400
MAX_PIXELS = 30000  # per side; matplotlib refuses 2**16, so a very long trajectory gets a lower DPI


def edge_lanes(edges: Sequence[tuple[int, int]]) -> list[int]:
    """A lane for each (earlier row, later row) edge: the innermost one where it shares no row with another edge,
    shorter edges inside, so that no two vertical runs overlap and nested edges do not cross."""
    lanes: list[list[tuple[int, int]]] = []
    assigned = [0] * len(edges)
    for position in sorted(range(len(edges)), key=lambda k: (edges[k][1] - edges[k][0], edges[k])):
        low, high = edges[position]
        lane = next((number for number, taken in enumerate(lanes)
                     if all(high < start or low > end for start, end in taken)), len(lanes))
        if lane == len(lanes):
            lanes.append([])
        lanes[lane].append((low, high))
        assigned[position] = lane
    return assigned


def _record_name(record: str) -> str:
    if len(record) <= RECORD_CHARS:
        return record
    keep = RECORD_CHARS - 1
    return record[: keep // 3] + "…" + record[-(keep - keep // 3):]


def draw_graph(result: CreditResult, path: Path, title: str = "") -> Path:
    """Draw the dependency graph of `result` to `path` (PNG or SVG by its extension); returns the path written."""
    if path.suffix.lower() not in GRAPH_FORMATS:
        raise ValueError(f"{path}: the graph is written as {' or '.join(GRAPH_FORMATS)}, by extension")
    figure = graph_figure(result, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path


def graph_figure(result: CreditResult, title: str = "") -> Figure:
    """The figure itself (matplotlib's Figure, no pyplot state), sized to its rows and columns."""
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Rectangle
    from matplotlib.path import Path as CurvePath

    commands = result.commands
    row_of = {command.index: row for row, command in enumerate(commands)}
    is_write = {command.index: command.is_write for command in commands}
    records = sorted(set(result.verifier_records) | {record for _, record, _ in result.verifier_edges})
    names = [_record_name(record) for record in records]
    # (earlier row, later row, colour, line style) of each edge drawn: information and G_E edges first, then the rest
    # of G, up to MAX_EDGES (beyond, lanes would be a blur, and drawing takes minutes); the footer counts the others
    information = [(row_of[r], row_of[c], "tab:orange", "--") for r, c in result.information_edges
                   if r in row_of and c in row_of]
    data = [(row_of[c], row_of[r], "tab:blue" if is_write[r] else "0.62", "-")
            for c, r in result.dependency_edges if c in row_of and r in row_of]
    ranked = information + [edge for edge in data if edge[2] == "tab:blue"] + [e for e in data if e[2] == "0.62"]
    edges, left_out = ranked[:MAX_EDGES], len(ranked) - MAX_EDGES
    lanes = edge_lanes([(low, high) for low, high, _, _ in edges])
    lane_count = max(lanes, default=-1) + 1
    lane_step = min(LANE, MAX_LANES_WIDTH / lane_count) if lane_count else LANE

    # Columns, in inches from the left edge.
    x_factor = 0.55  # "t12" right-aligned at x_factor - 0.05; factor bar and number after it
    x_command = x_factor + 0.95
    x_role = x_command + (COMMAND_CHARS + 5 + 2) * CHAR
    x_q = x_role + 28 * CHAR + 0.1
    x_node = x_q + 0.45
    x_lanes = x_node + 0.22
    x_records = x_lanes + lane_count * lane_step + 0.25
    header = max((len(name) for name in names), default=0) * CHAR * 0.72 + 0.35  # names at 45 degrees
    width = max(x_records + len(records) * RECORD_COLUMN + 0.2 + header * 0.72, 8.5)
    top = 0.45 + max(0.55, header)  # title, then the legend, beside the records' slanted names (right of it)
    footer = 0.6
    height = top + max(len(commands), 1) * ROW + footer
    dpi = min(DPI, int(MAX_PIXELS / max(width, height)))

    figure = Figure(figsize=(width, height), dpi=dpi)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_axis_off()
    axes.set_xlim(0, width)
    axes.set_ylim(-height, 0)

    def text(x: float, y: float, words: str, **style) -> None:
        # parse_math off: a command's `$HOME ... $PATH` is shell, not TeX
        axes.text(x, y, words, **{"fontsize": FONT, "va": "center", "parse_math": False, **style})

    def row_y(row: int) -> float:
        return -top - (row + 0.5) * ROW

    credited = sum(command.q > 0 for command in commands)
    heading = f"{len(commands)} commands, {credited} with credit; fallback: {result.fallback or 'none'}"
    text(0.15, -0.22, f"{title}  ·  {heading}" if title else heading, fontsize=FONT + 1, weight="bold")
    if not commands:
        text(0.15, row_y(0), "no command was credited: nothing to draw", style="italic")

    # Column headers, just above the first row.
    y_head = -top + 0.12
    columns = [(x_factor - 0.05, "turn", "right"), (x_factor, "f_t", "left"),
               (x_command, "#    command (first line)", "left"), (x_role, "role", "left"),
               (x_node - 0.12, "q(c)", "right")]
    if lane_count * lane_step >= 0.4:  # room for the word before the first record's name
        columns.append((x_lanes, "edges", "left"))
    for x, words, align in columns:
        text(x, y_head, words, ha=align, weight="bold")
    for k, name in enumerate(names):
        text(x_records + (k + 0.5) * RECORD_COLUMN - 0.04, y_head - 0.02, name, family="monospace", rotation=45,
             rotation_mode="anchor", ha="left", va="bottom")

    # Rows: a light band per turn, so that commands of one turn read together.
    factors = result.step_factors
    largest = max(factors, default=0.0) or 1.0
    previous_turn = None
    band = False
    for row, command in enumerate(commands):
        y = row_y(row)
        if command.turn != previous_turn:
            band = not band
        if band:
            axes.add_patch(Rectangle((0.05, y - ROW / 2), width - 0.1, ROW, color="0.94", lw=0, zorder=0))
        if command.turn != previous_turn:
            factor = factors[command.turn] if 0 <= command.turn < len(factors) else float("nan")
            text(x_factor - 0.05, y, f"t{command.turn}", ha="right")
            axes.add_patch(Rectangle((x_factor, y - ROW * 0.3), 0.45 * max(factor, 0.0) / largest, ROW * 0.6,
                                     color="tab:purple", alpha=0.45, lw=0, zorder=1))
            text(x_factor + 0.48, y, f"{factor:.2f}", ha="left")
        previous_turn = command.turn
        text(x_command, y, f"{command.index:<4} {short_command(command.text, COMMAND_CHARS)}", family="monospace")
        text(x_role, y, command.role, color="0.3")
        text(x_node - 0.12, y, f"{command.q:.2f}", ha="right", weight="bold" if command.q > 0 else "normal")

    norm, cmap = Normalize(0.0, 1.0), colormaps["YlOrRd"]
    for marker, kind in (("o", True), ("D", False)):
        rows = [row for row, command in enumerate(commands) if command.is_write is kind]
        if rows:
            axes.scatter([x_node] * len(rows), [row_y(row) for row in rows], c=[commands[row].q for row in rows],
                         cmap=cmap, norm=norm, marker=marker, s=70 if kind else 50, edgecolors="black",
                         linewidths=0.6, zorder=4)

    # Edges: out of a node just above its centre, into the later node just below it, arrow at the later one.
    for (low, high, colour, style), lane in zip(edges, lanes):
        x = x_lanes + lane * lane_step
        start, end = row_y(low) + ROW * 0.15, row_y(high) - ROW * 0.15
        curve = CurvePath([(x_node + 0.08, start), (x, start), (x, end), (x_node + 0.1, end)],
                          [CurvePath.MOVETO, CurvePath.LINETO, CurvePath.LINETO, CurvePath.LINETO])
        axes.add_patch(FancyArrowPatch(path=curve, arrowstyle="-|>", mutation_scale=7, color=colour,
                                       linestyle=style, lw=0.9, zorder=2 if colour == "0.62" else 3))

    # E: a column per record, a dot per write -> record edge.
    for k in range(len(records)):
        x = x_records + (k + 0.5) * RECORD_COLUMN
        axes.plot([x, x], [row_y(0) + ROW / 2, row_y(len(commands) - 1) - ROW / 2], color="0.8", lw=0.5, zorder=1)
    column = {record: k for k, record in enumerate(records)}
    for c, record, survival in result.verifier_edges:
        if c in row_of:
            x, y = x_records + (column[record] + 0.5) * RECORD_COLUMN, row_y(row_of[c])
            axes.scatter([x], [y], marker="o", s=36, zorder=4, linewidths=1.0,
                         facecolors="tab:green" if survival > 0 else "white",
                         edgecolors="darkgreen" if survival > 0 else "0.5")

    axes.legend(handles=[
        Line2D([], [], marker="o", ls="", mfc="tab:red", mec="black", label="write command (colour: q(c))"),
        Line2D([], [], marker="D", ls="", mfc="khaki", mec="black", label="read command"),
        Line2D([], [], color="tab:blue", label="G_E: a later write used its output"),
        Line2D([], [], color="0.62", label="G: a later read saw its output"),
        Line2D([], [], color="tab:orange", ls="--", label="information: a later command used a value it showed"),
        Line2D([], [], marker="o", ls="", mfc="tab:green", mec="darkgreen", label="its write reaches E (survives)"),
        Line2D([], [], marker="o", ls="", mfc="white", mec="0.5", label="wrote a record of E, did not survive"),
        Rectangle((0, 0), 1, 1, color="tab:purple", alpha=0.45, label="step factor f_t of the turn"),
    ], loc="upper left", bbox_to_anchor=(0.1, -0.38), bbox_transform=axes.transData, ncol=3, fontsize=FONT - 0.5,
        frameon=False, handlelength=1.8, columnspacing=1.2, borderaxespad=0)
    if records:
        text(x_records + len(records) * RECORD_COLUMN, -height + 0.42, "↑ records of E (what the verifier inspected)",
             weight="bold", ha="right")
    if left_out > 0:
        text(0.15, -height + 0.42, f"{left_out} edges of G not drawn (at most {MAX_EDGES}; the JSON output has all)",
             color="0.3")
    without = [turn for turn in range(len(factors)) if turn not in {command.turn for command in commands}]
    if without:
        shown = " ".join(f"t{turn}={factors[turn]:.2f}" for turn in without[:24])
        text(0.15, -height + 0.17, f"step factors of turns without a command: {shown}"
             + (f" … ({len(without) - 24} more)" if len(without) > 24 else ""), color="0.3")
    return figure
