"""The editing catalogue as a Markdown table, for docs/editing.md (a test keeps the file current).

One row per operation: its ``medseg edit`` flag with its values, where the app offers it (the tool and
its key, a button of the Edit panel, or the Segment panel for a model-backed one) and what it does.
"""

from __future__ import annotations

from medseg.edit.operations import CATALOGUE, tools


def _in_the_app(name: str) -> str:
    op = CATALOGUE[name]
    if op.gesture is not None:
        return f"{op.title} tool, key **{op.shortcut}**"
    if op.locks:
        return "the Locked box"
    if any(p.kind == "model" for p in op.inputs):
        return f"the {op.title} button (Segment panel, Ctrl+G)"
    if op.inputs:
        return "—"
    return f"{op.title} button"


def catalogue_table() -> str:
    rows = ["| `medseg edit` | In the app | What it does |", "|---|---|---|"]
    navigate = tools()["navigate"]
    rows.append(f"| — | {navigate.title} tool, key **{navigate.shortcut}** | {navigate.help} |")
    for name, op in CATALOGUE.items():
        values = " ".join(p.metavar for p in op.positional)
        options = " ".join(f"[{p.option}{' ' + p.metavar if p.kind != 'flag' else ''}]"
                           for p in op.parameters if p.option is not None)
        flag = " ".join(part for part in (f"--{name}", values, options) if part)
        text = op.help.replace("|", "\\|")
        rows.append(f"| `{flag}` | {_in_the_app(name)} | {text} |")
    return "\n".join(rows) + "\n"
