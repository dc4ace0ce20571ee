"""Read a playbook YAML file into a checked ``Playbook``, or report every mistake with its place.

Each error names the file, the 1-based line and column, the dotted path inside the document and
what was expected: YAML syntax, wrong types and unknown fields (from the pydantic schema), unknown
stages and tools, invalid JSON Schemas for tool arguments, and handlers that cannot be imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError

from .errors import Issue, PlaybookLoadError
from .schema import PLACEHOLDER, READ_BACK_PLACE, Collect, Playbook, PythonHandler, Transition

__all__ = ["RESERVED_TOOLS", "load_playbook", "load_playbook_text"]

RESERVED_TOOLS = ("playbook_transition", "classify_intent")

Path_ = tuple[str | int, ...]
MAX_VALUES = 100_000  # the bundled playbooks hold a few hundred


class _Positions:
    """Where each node of the YAML document starts: path -> (line, column), both 1-based."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.values: dict[Path_, tuple[int, int]] = {}
        self.keys: dict[Path_, tuple[int, int]] = {}
        self.issues: list[Issue] = []

    def walk(self, node: yaml.Node, path: Path_ = ()) -> None:
        if len(self.values) >= MAX_VALUES:  # aliases nest: "a billion laughs" in a few lines
            raise PlaybookLoadError([Issue(self.file, 1, 1, "", f"the playbook holds more than "
                                           f"{MAX_VALUES:,} values (aliases nested in aliases?)")])
        self.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                key = key_node.value
                if key in seen:
                    self.issues.append(Issue(
                        self.file, key_node.start_mark.line + 1, key_node.start_mark.column + 1,
                        _dotted((*path, key)), f"duplicate key {key!r} (each key may appear once)"))
                seen.add(key)
                self.keys[(*path, key)] = (key_node.start_mark.line + 1,
                                           key_node.start_mark.column + 1)
                self.walk(value_node, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.walk(item, (*path, i))

    def locate(self, loc: Path_, *, key: bool = False) -> tuple[Path_, tuple[int, int]]:
        """The deepest existing node along ``loc`` (pydantic inserts union tags: skipped)."""
        found: Path_ = ()
        for part in loc:
            if (*found, part) in self.values:
                found = (*found, part)
            elif isinstance(part, str) and (*found, part.rstrip("_")) in self.values:
                found = (*found, part.rstrip("_"))  # from_ -> from
        if key and found in self.keys:
            return found, self.keys[found]
        return found, self.values.get(found, (1, 1))

    def issue(self, loc: Path_, message: str, *, key: bool = False) -> Issue:
        path, (line, col) = self.locate(loc, key=key)
        return Issue(self.file, line, col, _dotted(path), message)


def _is_tag(part: str | int) -> bool:
    return isinstance(part, str) and (part[:1].isupper() or "[" in part or "-" in part)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _is_tag(part):
            out += ("." if out else "") + str(part).rstrip("_")
    return out


def load_playbook(path: str | Path, *, check_handlers: bool = True) -> Playbook:
    """Load and check one playbook file; raise ``PlaybookLoadError`` listing every issue."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookLoadError([Issue(str(path), 1, 1, "", f"cannot read the file: {exc}")]) \
            from None
    return load_playbook_text(text, file=str(path), base_dir=path.parent,
                              check_handlers=check_handlers)


def load_playbook_text(text: str, *, file: str = "<playbook>", base_dir: Path | None = None,
                       check_handlers: bool = False) -> Playbook:
    """Like ``load_playbook`` for text; ``base_dir`` is where relative tool modules are found."""
    positions = _Positions(file)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        ctx_mark = exc.context_mark
        if ctx_mark is not None and mark is not None and ctx_mark.line != mark.line:
            what += f" (the construct began at line {ctx_mark.line + 1}, column " \
                    f"{ctx_mark.column + 1})"
        raise PlaybookLoadError([Issue(file, line, col, "", f"YAML syntax error: {what}")]) \
            from None
    except yaml.YAMLError as exc:
        raise PlaybookLoadError([Issue(file, 1, 1, "", f"YAML error: {exc}")]) from None
    if node is None or not isinstance(data, dict):
        raise PlaybookLoadError([Issue(file, 1, 1, "", "expected a mapping with id, "
                                       "initial_stage, stages, transitions and tools")])
    positions.walk(node)
    if positions.issues:
        raise PlaybookLoadError(positions.issues)
    try:
        playbook = Playbook.model_validate(data)
    except ValidationError as exc:
        raise PlaybookLoadError(_merge([_from_pydantic(positions, err)
                                        for err in exc.errors()])) from None
    issues = _cross_check(playbook, positions, base_dir if check_handlers else None)
    if issues:
        raise PlaybookLoadError(issues)
    playbook._base_dir = base_dir
    return playbook


def _from_pydantic(positions: _Positions, err: Any) -> Issue:
    loc: Path_ = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent, _ = positions.locate(loc[:-1])
        expected = _expected_fields(parent)
        hint = f" (expected one of: {', '.join(expected)})" if expected else ""
        return positions.issue(loc, f"unknown field {loc[-1]!r}{hint}", key=True)
    if kind == "missing":
        return positions.issue(loc, f"missing required field {str(loc[-1]).rstrip('_')!r}")
    message = err["msg"]
    if kind not in ("value_error", "assertion_error"):
        given = err.get("input")
        if not isinstance(given, dict | list):
            message += f" (got {given!r})"
    return positions.issue(loc, message.removeprefix("Value error, "))


def _merge(issues: list[Issue]) -> list[Issue]:
    """One issue per place: the alternatives of a union become "A, or B"."""
    merged: dict[tuple[int, int, str], list[str]] = {}
    for issue in issues:
        messages = merged.setdefault((issue.line, issue.column, issue.path), [])
        if issue.message not in messages:
            messages.append(issue.message)
    file = issues[0].file if issues else ""
    return [Issue(file, line, col, path, "; or ".join(msgs))
            for (line, col, path), msgs in merged.items()]


def _expected_fields(parent: Path_) -> list[str]:
    """Field names allowed at ``parent`` (best effort, from the schema models)."""
    from . import schema as s

    model: Any = s.Playbook
    for part in parent:
        if model is None:
            return []
        if model is s.Playbook and part in ("stages", "tools", "intents"):
            model = {"stages": "stage-map", "tools": "tool-map", "intents": None}[part]
        elif model == "stage-map":
            model = s.Stage
        elif model == "tool-map":
            model = s.Tool
        elif model is s.Playbook and part == "transitions":
            model = "transition-list"
        elif model == "transition-list":
            model = s.Transition
        else:
            sub = {"globals": s.Globals, "when": s.Condition, "turn_taking": s.TurnTaking,
                   "llm": s.LLMOptions, "on_enter": s.OnEnter, "tool_result": s.ToolResultMatch,
                   "http": s.HttpSpec}.get(str(part))
            if sub is None and part == "handler":
                return ["python", "timeout_s", "options", "http"]
            model = sub
    if isinstance(model, type):
        return sorted((f.alias or n) for n, f in model.model_fields.items())
    return []


def _cross_check(pb: Playbook, pos: _Positions, base_dir: Path | None) -> list[Issue]:
    issues: list[Issue] = []
    stages = sorted(pb.stages)
    tools = sorted(pb.tools)

    def need_stage(name: str, loc: Path_, *, star: bool = False) -> None:
        if name not in pb.stages and not (star and name == "*"):
            issues.append(pos.issue(loc, f"unknown stage {name!r} (expected one of: "
                                    f"{', '.join(['*', *stages] if star else stages)})"))

    def need_tool(name: str, loc: Path_) -> None:
        if name not in pb.tools:
            issues.append(pos.issue(loc, f"unknown tool {name!r} (expected one of: "
                                    f"{', '.join(tools) or 'no tools are defined'})"))

    need_stage(pb.initial_stage, ("initial_stage",))
    for i, name in enumerate(pb.globals.tools):
        need_tool(name, ("globals", "tools", i))
    for sname, stage in pb.stages.items():
        for i, name in enumerate(stage.tools):
            need_tool(name, ("stages", sname, "tools", i))
        if isinstance(stage.tool_choice, dict):
            forced = stage.tool_choice["name"]
            if forced not in pb.stage_tools(sname):
                issues.append(pos.issue(("stages", sname, "tool_choice", "name"),
                                        f"tool_choice names {forced!r}, which is not among the "
                                        f"stage's tools ({', '.join(pb.stage_tools(sname))})"))
        if stage.collect is not None:
            issues.extend(_check_collect(pb, pos, sname, stage.collect))
        for key, value in (stage.on_enter.set if stage.on_enter else {}).items():
            if isinstance(value, str) and "${" in value:
                issues.append(pos.issue(("stages", sname, "on_enter", "set", key),
                                        "placeholders take a tool's values: use them in the "
                                        "`set` of a transition `when: tool_called` or "
                                        "`tool_result`", key=True))
    for i, tr in enumerate(pb.transitions):
        loc: Path_ = ("transitions", i)
        if isinstance(tr.from_, str):
            need_stage(tr.from_, (*loc, "from"), star=True)
        else:
            for j, src in enumerate(tr.from_):
                need_stage(src, (*loc, "from", j), star=True)
        if tr.to is not None:
            need_stage(tr.to, (*loc, "to"))
        elif not (tr.say or tr.set or tr.clear_history):
            issues.append(pos.issue(loc, "a transition needs `to` or an action (say, set, "
                                    "clear_history)"))
        cond, kind = tr.when, tr.when.kind
        if tr.set:
            issues.extend(_check_placeholders(pb, pos, loc, tr))
        if kind == "tool_called":
            need_tool(cond.tool_called, (*loc, "when", "tool_called"))
        elif kind == "tool_result":
            need_tool(cond.tool_result.tool, (*loc, "when", "tool_result", "tool"))
        elif kind == "intent" and cond.intent not in pb.intents:
            issues.append(pos.issue((*loc, "when", "intent"), f"unknown intent {cond.intent!r} "
                                    f"(declare it under `intents:`; known: "
                                    f"{', '.join(sorted(pb.intents)) or 'none'})"))
        elif kind == "llm_decision" and tr.to is None:
            issues.append(pos.issue((*loc, "when"), "an llm_decision transition needs `to`"))
        elif kind in ("max_turns", "timeout_s") and getattr(cond, kind) is True:
            for src in tr.sources:
                if src != "*" and src in pb.stages and getattr(pb.stages[src], kind) is None:
                    issues.append(pos.issue((*loc, "when", kind), f"`{kind}: true` needs "
                                            f"stage {src!r} to set {kind}"))
    for tname, tool in pb.tools.items():
        if tname in RESERVED_TOOLS:
            issues.append(pos.issue(("tools", tname), f"tool name {tname!r} is reserved for the "
                                    "engine (choose another name)", key=True))
        loc = ("tools", tname, "parameters")
        try:
            Draft202012Validator.check_schema(tool.parameters)
        except SchemaError as exc:
            where = (*loc, *exc.path)
            issues.append(pos.issue(where, f"invalid JSON Schema: {exc.message}"))
        else:
            if tool.parameters.get("type") != "object":
                issues.append(pos.issue(loc, "tool parameters must be a JSON Schema with "
                                        "type: object"))
        if base_dir is not None and isinstance(tool.handler, PythonHandler):
            from .tools import HandlerImportError, resolve_python

            try:
                resolve_python(tool.handler.python, base_dir)
            except HandlerImportError as exc:
                issues.append(pos.issue(("tools", tname, "handler", "python"), str(exc)))
    return issues


def _check_collect(pb: Playbook, pos: _Positions, sname: str, collect: Collect) -> list[Issue]:
    loc: Path_ = ("stages", sname, "collect")
    tool = pb.tools.get(collect.tool)
    if tool is None:
        return [pos.issue((*loc, "tool"), f"unknown tool {collect.tool!r} (expected one of: "
                          f"{', '.join(sorted(pb.tools)) or 'no tools are defined'})")]
    params = sorted(tool.parameters.get("properties") or {})
    issues = [pos.issue((*loc, "ask", name), f"{collect.tool} has no argument {name!r} "
                        f"(its arguments: {', '.join(params) or 'none'})", key=True)
              for name in collect.ask if name not in params]
    for i, example in enumerate(collect.examples):
        issues.extend(pos.issue((*loc, "examples", i, "facts", name),
                                f"{collect.tool} has no argument {name!r}", key=True)
                      for name in example.facts if name not in params)
    said = READ_BACK_PLACE.findall(collect.confirm.say) if collect.confirm else []
    issues.extend(pos.issue((*loc, "confirm", "say"), f"{{{name}}}: {collect.tool} has no "
                            f"argument {name!r} (its arguments: {', '.join(params)})")
                  for name in said if name not in params)  # a typo is read out as "{nmae}"
    return issues


def _check_placeholders(pb: Playbook, pos: _Positions, loc: Path_,
                        tr: Transition) -> list[Issue]:
    """A transition's ``set`` value ``"${result.KEY}"`` / ``"${args.NAME}"`` is the whole
    string (engine._resolve), in a transition on a tool call, and names one of its arguments
    (when its schema lists them); a typo there stored null without a word (a newcomer's
    ``${reslt.order_id}``)."""
    issues = []
    tool = (tr.when.tool_called if tr.when.kind == "tool_called" else
            tr.when.tool_result.tool if tr.when.kind == "tool_result" else None)
    params = sorted((pb.tools[tool].parameters.get("properties") or {})
                    if tool in pb.tools else {})
    for key, value in tr.set.items():
        if not isinstance(value, str) or "${" not in value:
            continue
        where = (*loc, "set", key)
        whole = PLACEHOLDER.fullmatch(value)
        root, _, rest = whole.group(1).partition(".") if whole else ("", "", "")
        if whole is None:
            problem = (f"{value!r}: a placeholder is the whole value, as \"${{result.KEY}}\" "
                       "or \"${args.NAME}\" (no text around it)")
        elif root not in ("result", "args"):
            problem = (f"{value!r}: unknown placeholder {root!r} (expected ${{result.KEY}}, "
                       "the tool's result, or ${args.NAME}, its arguments)")
        elif tool is None:
            problem = (f"{value!r}: placeholders take a tool's values: use them in a "
                       "transition `when: tool_called` or `tool_result`")
        elif root == "args" and rest and params and rest.split(".")[0] not in params:
            problem = (f"{value!r}: {tool} has no argument {rest.split('.')[0]!r} (its "
                       f"arguments: {', '.join(params) or 'none'})")
        else:
            continue
        issues.append(pos.issue(where, problem))
    return issues
