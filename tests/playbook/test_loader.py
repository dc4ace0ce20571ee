"""Loader: the examples load; each class of mistake is reported with file, line and column."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from voice_server.cli import main
from voice_server.playbook import PlaybookLoadError, load_playbook, load_playbook_text
from voice_server.playbook.schema import playbook_json_schema

from .conftest import PLAYBOOKS

GOOD = """\
id: demo
initial_stage: start
stages:
  start: {system_prompt: Hi, tools: [lookup]}
  end: {}
transitions:
  - {from: start, to: end, when: {tool_called: lookup}}
tools:
  lookup:
    parameters: {type: object, properties: {q: {type: string}}}
    handler: {python: "json:dumps"}
"""


def setting(value: str, when: str = "{tool_called: lookup}") -> str:
    """GOOD with its transition on ``when`` setting ``x: "VALUE"``."""
    return GOOD.replace("when: {tool_called: lookup}", f'when: {when}, set: {{x: "{value}"}}')


def issues(text: str, **kw) -> list[str]:
    with pytest.raises(PlaybookLoadError) as info:
        load_playbook_text(textwrap.dedent(text), file="pb.yaml", **kw)
    return [str(i) for i in info.value.issues]


@pytest.mark.parametrize("name", ["restaurant", "support", "appointments"])
def test_examples_load(name: str) -> None:
    """The three example playbooks load with their tool handlers importable."""
    pb = load_playbook(PLAYBOOKS / f"{name}.yaml")
    assert pb.id == name
    assert pb.initial_stage in pb.stages
    assert pb.base_dir == PLAYBOOKS


def test_good_minimal() -> None:
    """A minimal playbook loads; globals take their defaults."""
    pb = load_playbook_text(GOOD, check_handlers=True)
    assert pb.stage_tools("start") == ["lookup"]
    assert pb.globals.max_tool_rounds == 3


CASES = [
    ("yaml syntax", GOOD.replace("stages:\n", "stages:\n  bad: [unclosed\n"),
     ["pb.yaml:5:8: YAML syntax error: while parsing a flow sequence expected ',' or ']', "
      "but got ':' (the construct began at line 4, column 8)"]),
    ("unknown stage in transition", GOOD.replace("to: end", "to: ending"),
     ["pb.yaml:7:23: transitions[0].to: unknown stage 'ending' (expected one of: end, start)"]),
    ("unknown source stage", GOOD.replace("from: start", "from: [start, nowhere]"),
     ["pb.yaml:7:20: transitions[0].from[1]: unknown stage 'nowhere' (expected one of: *, end, "
      "start)"]),
    ("unknown tool in stage", GOOD.replace("tools: [lookup]", "tools: [lookup, serach]"),
     ["pb.yaml:4:46: stages.start.tools[1]: unknown tool 'serach' (expected one of: lookup)"]),
    ("unknown tool in condition", GOOD.replace("tool_called: lookup", "tool_called: find"),
     ["pb.yaml:7:48: transitions[0].when.tool_called: unknown tool 'find' (expected one of: "
      "lookup)"]),
    ("bad JSON Schema", GOOD.replace("q: {type: string}", "q: {type: strin}"),
     ["pb.yaml:10:55: tools.lookup.parameters.properties.q.type: invalid JSON Schema: 'strin' is "
      "not valid under any of the given schemas"]),
    ("parameters not an object schema", GOOD.replace("type: object, properties",
                                                     "type: array, items"),
     ["pb.yaml:10:17: tools.lookup.parameters: tool parameters must be a JSON Schema with type: "
      "object"]),
    ("wrong type", GOOD.replace("stages:\n", "globals: {max_tool_rounds: many}\nstages:\n"),
     ["pb.yaml:3:28: globals.max_tool_rounds: Input should be a valid integer, unable to parse "
      "string as an integer (got 'many')"]),
    ("number out of range", GOOD.replace("stages:\n", "globals: {max_tool_rounds: 0}\nstages:\n"),
     ["pb.yaml:3:28: globals.max_tool_rounds: Input should be greater than or equal to 1 "
      "(got 0)"]),
    ("unknown field", GOOD.replace("  end: {}", "  end: {system_promt: Bye}"),
     ["pb.yaml:5:9: stages.end.system_promt: unknown field 'system_promt' (expected one of: "
      "collect, llm, max_turns, on_enter, system_prompt, timeout_s, tool_choice, tools, "
      "turn_taking)"]),
    ("an offer the tool's answer does not make", GOOD.replace(
        'handler: {python: "json:dumps"}', 'handler: {python: "json:dumps"}\n    offer_from: x'),
     ["pb.yaml:10:5: tools.lookup: offer_from needs answer_from: an offer the caller accepts "
      "must be one the tool's own answer made"]),
    ("missing field", GOOD.replace("initial_stage: start\n", ""),
     ["pb.yaml:1:1: missing required field 'initial_stage'"]),
    ("two conditions", GOOD.replace("{tool_called: lookup}",
                                    "{tool_called: lookup, keyword: [x]}"),
     ["pb.yaml:7:34: transitions[0].when: expected exactly one condition among keyword, intent, "
      "tool_called, tool_result, llm_decision, max_turns, timeout_s; found keyword, "
      "tool_called"]),
    ("duplicate key", GOOD.replace("  end: {}", "  end: {}\n  start: {}"),
     ["pb.yaml:6:3: stages.start: duplicate key 'start' (each key may appear once)"]),
    ("unknown intent", GOOD.replace("{tool_called: lookup}", "{intent: buy}"),
     ["pb.yaml:7:43: transitions[0].when.intent: unknown intent 'buy' (declare it under "
      "`intents:`; known: none)"]),
    ("forced tool not in stage", GOOD.replace("  end: {}", "  end: {tool_choice: {name: lookup}}"),
     ["pb.yaml:5:29: stages.end.tool_choice.name: tool_choice names 'lookup', which is not among "
      "the stage's tools ()"]),
    ("max_turns true without stage value", GOOD.replace("{tool_called: lookup}",
                                                        "{max_turns: true}"),
     ["pb.yaml:7:46: transitions[0].when.max_turns: `max_turns: true` needs stage 'start' to set "
      "max_turns"]),
    ("reserved tool name", GOOD.replace("lookup", "playbook_transition"),
     ["pb.yaml:9:3: tools.playbook_transition: tool name 'playbook_transition' is reserved for "
      "the engine (choose another name)"]),
    ("handler not importable", GOOD.replace("json:dumps", "json:nope"),
     ["pb.yaml:11:23: tools.lookup.handler.python: module 'json' has no function 'nope'"]),
    ("bad handler spec", GOOD.replace('{python: "json:dumps"}', "{python: json.dumps}"),
     ["pb.yaml:11:23: tools.lookup.handler.python: String should match pattern "
      "'^[A-Za-z_][\\w.]*:[A-Za-z_]\\w*$' (got 'json.dumps')"]),
    ("handler of no kind", GOOD.replace('{python: "json:dumps"}', "{shell: ls}"),
     ["pb.yaml:11:14: tools.lookup.handler: expected `python: module:function` or "
      "`http: {url: ...}`"]),
    ("placeholder root misspelt", setting("${reslt.id}"),
     ["pb.yaml:7:66: transitions[0].set.x: '${reslt.id}': unknown placeholder 'reslt' "
      "(expected ${result.KEY}, the tool's result, or ${args.NAME}, its arguments)"]),
    ("placeholder argument misspelt", setting("${args.query}"),
     ["pb.yaml:7:66: transitions[0].set.x: '${args.query}': lookup has no argument 'query' "
      "(its arguments: q)"]),
    ("placeholder inside text", setting("id ${result.id}"),
     ["pb.yaml:7:66: transitions[0].set.x: 'id ${result.id}': a placeholder is the whole "
      "value, as \"${result.KEY}\" or \"${args.NAME}\" (no text around it)"]),
    ("placeholder without a tool", setting("${args.q}", when="{keyword: [done]}"),
     ["pb.yaml:7:62: transitions[0].set.x: '${args.q}': placeholders take a tool's values: use "
      "them in a transition `when: tool_called` or `tool_result`"]),
    ("placeholder on entering a stage", GOOD.replace("  end: {}",
                                                     "  end: {on_enter: {set: {x: "
                                                     "\"${result.id}\"}}}"),
     ["pb.yaml:5:26: stages.end.on_enter.set.x: placeholders take a tool's values: use them in "
      "the `set` of a transition `when: tool_called` or `tool_result`"]),
    ("not a mapping", "- just\n- a list\n",
     ["pb.yaml:1:1: expected a mapping with id, initial_stage, stages, transitions and tools"]),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_mistakes_are_located(text: str, expected: list[str]) -> None:
    """Each mistake is reported as file:line:column: path: what is wrong / what is expected."""
    assert issues(text, check_handlers=True, base_dir=Path.cwd()) == expected


def test_every_issue_is_reported() -> None:
    """Several mistakes of one pass are all listed, in file order."""
    text = GOOD.replace("to: end", "to: ending").replace("tools: [lookup]", "tools: [nope]")
    got = issues(text)
    assert [g.split(":")[1] for g in got] == ["4", "7"]


def test_unreadable_file(tmp_path: Path) -> None:
    """A missing file is an issue, not a traceback."""
    with pytest.raises(PlaybookLoadError) as info:
        load_playbook(tmp_path / "missing.yaml")
    assert info.value.issues[0].line == 1
    assert "cannot read the file" in info.value.issues[0].message


def test_aliases_nested_in_aliases_are_refused_at_once() -> None:
    """Nine levels of ten aliases each ("a billion laughs") ran until killed and took
    gigabytes (a fuzzing run, 2026-11-30); one alias used once is still fine."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    with pytest.raises(PlaybookLoadError) as info:
        load_playbook_text("\n".join(lines) + "\n")
    assert "more than 100,000 values" in info.value.issues[0].message
    shared = GOOD.replace("{system_prompt: Hi,", "{system_prompt: &hi Hi,").replace(
        "end: {}", "end: {system_prompt: *hi}")
    assert load_playbook_text(shared).stages["end"].system_prompt == "Hi"


def test_published_schema_is_current() -> None:
    """playbooks/schema.json is current (`voice-server playbook schema > playbooks/schema.json`)."""
    published = json.loads((PLAYBOOKS / "schema.json").read_text())
    assert published == json.loads(json.dumps(playbook_json_schema()))


def test_published_schema_accepts_examples() -> None:
    """The examples validate against the published JSON Schema too (what editors use)."""
    import yaml
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(json.loads((PLAYBOOKS / "schema.json").read_text()))
    for name in ("restaurant", "support", "appointments"):
        data = yaml.safe_load((PLAYBOOKS / f"{name}.yaml").read_text())
        assert list(validator.iter_errors(data)) == [], name


def test_cli_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`voice-server playbook validate` exits 0 for good files and 1 with readable errors."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("to: end", "to: ending"))
    assert main(["playbook", "validate", str(PLAYBOOKS / "restaurant.yaml")]) == 0
    assert "restaurant.yaml: ok (id restaurant; 3 stages" in capsys.readouterr().out
    assert main(["playbook", "validate", str(PLAYBOOKS / "support.yaml"), str(bad)]) == 1
    captured = capsys.readouterr()
    assert "support.yaml: ok" in captured.out
    assert captured.err == (f"{bad}: invalid (1 problem)\n  {bad}:7:23: transitions[0].to: "
                            f"unknown stage 'ending' (expected one of: end, start)\n")
    # a folder is its *.yaml, as the server reads it (a newcomer tried the folder first)
    assert main(["playbook", "validate", str(PLAYBOOKS)]) == 0
    assert [line.split(": ")[0] for line in capsys.readouterr().out.splitlines()] == [
        str(PLAYBOOKS / f"{name}.yaml") for name in ("appointments", "restaurant", "support")]
    (tmp_path / "bad.yaml").unlink()
    assert main(["playbook", "validate", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"no playbook files (*.yaml, *.yml) in {tmp_path}\n"


def test_cli_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`voice-server playbook schema` prints the published schema."""
    assert main(["playbook", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(
        (PLAYBOOKS / "schema.json").read_text())


def test_lint_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unreachable stages, unoffered tools and unused intents are warned about; --strict fails."""
    from voice_server.playbook import lint

    for name in ("restaurant", "support", "appointments"):
        assert lint(load_playbook(PLAYBOOKS / f"{name}.yaml")) == [], name
    text = GOOD.replace("  end: {}", "  end: {}\n  island: {}").replace(
        "tools:\n  lookup:", "intents: {buy: to buy}\ntools:\n  spare: {handler: {python: "
        "\"json:dumps\"}}\n  lookup:")
    file = tmp_path / "lint.yaml"
    file.write_text(text)
    expected = ["stage 'island' cannot be reached from the initial stage 'start'",
                "tool 'spare' is not offered in any stage (add it to a stage's or the globals' "
                "tools)",
                "intent 'buy' is declared but no transition uses it"]
    assert lint(load_playbook(file)) == expected
    assert main(["playbook", "validate", str(file)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [f"  warning: {w}" for w in expected]
    assert main(["playbook", "validate", "--strict", str(file)]) == 1
    assert capsys.readouterr().out.startswith(f"{file}: fails --strict (id demo; ")


def test_cli_validate_ids_unique_in_a_folder(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Two files of one folder with one id: the second is invalid, as the server refuses it
    (a newcomer's copy of a playbook passed `validate` and was then not served)."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(GOOD)
    second.write_text(GOOD)
    assert main(["playbook", "validate", str(first), str(second)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{first}: ok (id demo; ")
    assert captured.err == (f"{second}: invalid (1 problem)\n  {second}:1:1: id: playbook id "
                            "'demo' is already used by a.yaml\n")


def test_lint_warns_of_a_collected_argument_nobody_asks_for() -> None:
    """A required argument of a `collect` tool with no `ask` question, which no `set` gives,
    is left to the model to ask for (a newcomer's salon playbook did this without a word)."""
    from voice_server.playbook import lint

    text = textwrap.dedent("""\
        id: salon
        initial_stage: booking
        stages:
          booking:
            collect: {tool: book, ask: {time: "What time?"}}
        transitions:
          - {from: booking, to: booking, when: {keyword: [vip]}, set: {tier: gold}}
        tools:
          book:
            parameters:
              type: object
              properties: {time: {type: string}, service: {type: string}, tier: {type: string}}
              required: [time, service, tier]
            handler: {python: "json:dumps"}
        """)
    assert lint(load_playbook_text(text)) == [
        "stage 'booking' collects 'service' without an `ask` question (the model words it)"]


def test_cli_validate_reads_a_folder_as_the_server_serves_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server serves a folder's *.yml as well as its *.yaml; `validate FOLDER` checked
    only the *.yaml, so a broken .yml passed and then was not served."""
    (tmp_path / "good.yaml").write_text(GOOD)
    broken = tmp_path / "other.yml"
    broken.write_text(GOOD.replace("id: demo", "id: other").replace("initial_stage: start",
                                                                      "initial_stage: nowhere"))
    (tmp_path / "notes.txt").write_text("not a playbook")
    assert main(["playbook", "validate", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{tmp_path / 'good.yaml'}: ok (id demo; ")
    assert captured.err.startswith(f"{broken}: invalid (")
    assert "nowhere" in captured.err
