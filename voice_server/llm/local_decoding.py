"""What the embedded model reads and may write: its chat prompt, its sampler, its tool calls.

``chat_formatter`` renders messages (and tools) with the model's own chat template;
``local_sampling.py`` picks the tokens, under the grammars built here.

Tool calls use the Hermes/Qwen ``<tool_call>`` format, grammar-constrained.

The model sees its tools the way its chat template presents them (Qwen2.5's template lists
them in the system message and asks for ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>``); a template without tool support gets the same text added to its system
message (``tools_system_text``). What the model writes after ``<tool_call>`` is constrained by
a GBNF grammar built from the tools' JSON Schemas (``tool_grammar``, a lazy grammar: free
text until the trigger, ``local_sampling.LazyToolSampler``), so a call always names a known
tool and its arguments always parse and match their schema's types, required keys and
patterns. With
``tool_choice`` "required" or a named function, the grammar applies from the first token.

``ToolCallSplitter`` separates a streamed answer into the text to speak (a "let me check"
preamble) and the calls, which are parsed when the answer ends; ``StopText`` decodes the
streamed tokens and stops at a stop string.

A named ``tool_choice`` writes the call's opening into the prompt (``forced_call``); a
structured answer (``response_format``) is grammar-constrained too (``json_grammar``), and one
of fixed keys is written in parts, its keys read and its values generated (``json_template``).

Issue 18, item 4 ("Tool calls that validate").
"""

from __future__ import annotations

import codecs
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from ..compat import llama_model
from .types import ToolCall

__all__ = ["OPEN", "TRIGGERS", "StopText", "ToolCallSplitter", "chat_formatter", "closed_json",
           "forced_call",
           "forced_tools", "json_grammar", "json_template", "pattern_classes",
           "schema_gbnf", "template_messages", "tool_grammar", "tools_system_text"]

log = logging.getLogger(__name__)

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# A pattern's escapes as classes llama-cpp-python's JSON-Schema converter (0.3.36) writes right:
# it copies "\d" or "\." into GBNF literals, which llama.cpp cannot parse.
_SHORTHAND = {"d": "[0-9]", "D": "[^0-9]", "w": "[A-Za-z0-9_]", "W": "[^A-Za-z0-9_]",
              "s": "[ \\t\\n\\r]", "S": "[^ \\t\\n\\r]"}
_SHORTHAND_IN_CLASS = {"d": "0-9", "w": "A-Za-z0-9_", "s": " \\t\\n\\r"}
_CONTROL = {"t": "\\t", "n": "\\n", "r": "\\r"}


def schema_gbnf(schema: Any, root: str = "root") -> str:
    """GBNF for JSON Schema ``schema`` (llama-cpp-python's converter, its patterns rewritten
    without escapes: ``pattern_classes``), its top rule named ``root`` (another name, so a
    grammar around it can use it as one of its rules)."""
    from llama_cpp import llama_grammar

    body = llama_grammar.json_schema_to_gbnf(json.dumps(_classes_in_patterns(schema)))
    return body if root == "root" else "\n".join(
        f"{root} ::=" + line[len("root ::="):] if line.startswith("root ::=") else line
        for line in body.splitlines())


def _classes_in_patterns(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: pattern_classes(v) if k == "pattern" and isinstance(v, str)
                else _classes_in_patterns(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_classes_in_patterns(v) for v in schema]
    return schema


def pattern_classes(pattern: str) -> str:
    """``pattern`` with every escape written as a character class: ``\\d{2}:\\d{2}`` ->
    ``[0-9]{2}:[0-9]{2}``, ``a\\.b`` -> ``a[.]b``, ``[\\w.]`` -> ``[A-Za-z0-9_.]``. A negated
    shorthand inside a class (``[^\\S]``) stays as it is."""
    out: list[str] = []
    in_class, i = False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escaped, i = pattern[i + 1], i + 2
            literal = _CONTROL.get(escaped) or ("\\" + escaped if escaped in "]\\^-" else escaped)
            if in_class:
                out.append(_SHORTHAND_IN_CLASS.get(escaped) or
                           ("\\" + escaped if escaped in "DWS" else literal))
            else:
                out.append(_SHORTHAND.get(escaped) or f"[{literal}]")
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]":
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


def forced_tools(tools: list[dict[str, Any]], choice: Any) -> tuple[list[dict[str, Any]], bool]:
    """The tools the answer may call, and whether it must call one (``tool_choice``)."""
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return [t for t in tools if t["function"]["name"] == name] or tools, True
    return tools, choice == "required"


def tool_grammar(tools: list[dict[str, Any]]) -> str:
    """GBNF for a ``<tool_call>`` block calling one of ``tools`` (one call an answer; the
    playbook's tool rounds call the next one)."""
    alternatives = [{
        "type": "object",
        "properties": {"name": {"const": t["function"]["name"]},
                       "arguments": t["function"].get("parameters") or {"type": "object"}},
        "required": ["name", "arguments"],
    } for t in tools]
    schema = alternatives[0] if len(alternatives) == 1 else {"oneOf": alternatives}
    body = schema_gbnf(schema, root="tool-call-json")
    return ('root ::= tool-call\n'  # one call an answer: a small model repeats calls in a loop
            f'tool-call ::= "{OPEN}" "\\n"? tool-call-json "\\n"? "{CLOSE}" | bare-call\n'
            # small models imitate the template's "{{"name": ...}}" example without its tags
            f'bare-call ::= tool-call-json | "{{" tool-call-json "}}"\n{body}\n')


def forced_call(tool: dict[str, Any]) -> tuple[str, str, tuple[tuple[str, str | None], ...]]:
    """For an answer that must call ``tool``: the start of the call, written into the prompt
    (so its dozen tokens are read in one batch, not generated one by one), the grammar of
    what follows, and the parts after it (``SamplingParams.segments``). Arguments whose keys
    are all required are written in parts as a structured answer is (``json_template``):
    their keys read, their values generated (an intent check: 3 steps instead of 7); others
    by one grammar (the arguments and the closing brace)."""
    name = tool["function"]["name"]
    parameters = tool["function"].get("parameters") or {"type": "object"}
    opening = f'{OPEN}\n{{"name": {json.dumps(name)}, "arguments": '
    template = json_template({"type": "json_schema", "json_schema": {
        "schema": {**parameters, "additionalProperties": False}}})
    if template is not None and template[1] is not None:
        start, first, rest = template
        if rest and rest[-1][1] is None:  # the last values given: the call closes after them
            return opening + start, first, (*rest[:-1], (rest[-1][0] + "}", None))
        return opening + start, first, (*rest, ("}", None))
    body = schema_gbnf(parameters, root="arguments")
    return opening, f'root ::= arguments "}}"\n{body}\n', ()


def json_template(response_format: dict[str, Any]) -> tuple[str, str | None, tuple[
        tuple[str, str | None], ...]] | None:
    """An object answer whose keys are all required and fixed (``additionalProperties: false``)
    written in parts: its keys are read, only the values are generated. Returns the text that
    opens it, the first value's grammar, and (text, value grammar) for each next value; None
    for any other schema. Each grammar ends with the "," or "}" after its value, so the
    model closes the value where it wants to (a number cannot run on into the next key), and
    the engine reads the next key once the grammar is complete (``SamplingParams.segments``).
    A structured answer of three keys is 12 tokens shorter to generate.

    A value with one possible text (``{"type": "null"}``, a ``const``) is read with the keys
    around it. When the last values are such, the last part's grammar is None: that text ends
    the answer; when every value is, the first grammar is None: the opening is the answer."""
    schema = (response_format.get("json_schema") or {}).get("schema") \
        if response_format.get("type") == "json_schema" else None
    if not isinstance(schema, dict) or schema.get("additionalProperties") is not False:
        return None
    props = schema.get("properties") or {}
    if not props or list(schema.get("required") or []) != list(props):
        return None
    parts: list[tuple[str, str | None]] = []
    text = "{"
    for i, (key, sub) in enumerate(props.items()):
        end = "}" if i == len(props) - 1 else ","
        text += ("" if i == 0 else " ") + json.dumps(key) + ":"
        if (given := _one_value(sub)) is not None:
            text += " " + given + end
            continue
        body = schema_gbnf(sub if isinstance(sub, dict) else {}, root="value")
        parts.append((text, f'root ::= " "? value "{end}"\n{body}\n'))
        text = ""
    if text or not parts:
        parts.append((text, None))
    (opening, first), *rest = parts
    return opening, first, tuple(rest)


def _one_value(schema: Any) -> str | None:
    """The JSON text of the one value ``schema`` allows, if it allows one (null, a const, an
    enum of one)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return json.dumps(schema["const"])
    if isinstance(enum := schema.get("enum"), list) and len(enum) == 1:
        return json.dumps(enum[0])  # [None]: "null"
    if schema.get("type") == "null":
        return "null"
    return None


def closed_json(text: str) -> bool:
    """Whether ``text`` is a whole JSON value that no more text can extend: ``null``, a
    string, an object; not a number ("2" may go on as "25")."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, bool) or not isinstance(value, (int, float))


def json_grammar(response_format: dict[str, Any]) -> str:
    """GBNF for an answer that is one JSON value: ``{"type": "json_schema", "json_schema":
    {"schema": ...}}`` (OpenAI's structured output), or any JSON object for
    ``{"type": "json_object"}``."""
    schema = (response_format.get("json_schema") or {}).get("schema") \
        if response_format.get("type") == "json_schema" else None
    return schema_gbnf(schema or {"type": "object"})


#: when the lazy grammar starts: at the tag anywhere, or at a JSON call opening the answer
TRIGGERS = (rf"[\s\S]*?({OPEN})[\s\S]*", r'\s*(\{\{?\s*"name")[\s\S]*')


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    """How a template without tool support learns its tools (Qwen2.5's own wording)."""
    listed = "\n".join(json.dumps(t) for t in tools)
    return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
            "\n\nYou are provided with function signatures within <tools></tools> XML tags:"
            f"\n<tools>\n{listed}\n</tools>\n\nFor each function call, return a json object "
            "with function name and arguments within <tool_call></tool_call> XML tags:\n"
            f'{OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{CLOSE}')


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as chat templates expect them: a call's arguments as an object (the
    OpenAI format carries a JSON string, which a template's ``tojson`` would quote again)."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = call.get("function") or {}
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args or "{}")
                    except ValueError:
                        args = {}
                calls.append({**call, "function": {**fn, "arguments": args}})
            message = {**message, "tool_calls": calls, "content": message.get("content") or ""}
        out.append(message)
    return out


class StopText:
    """Streams decoded text, holding back a tail that may be the start of a stop string."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""

    def push(self, piece: bytes) -> tuple[str, bool]:
        """Add a token's bytes; return (text that is safe to deliver, a stop string was hit)."""
        self._held += self._decoder.decode(piece)
        hits = [i for s in self._stop if (i := self._held.find(s)) >= 0]
        if hits:
            out, self._held = self._held[:min(hits)], ""
            return out, True
        keep = max((k for s in self._stop for k in range(1, len(s))
                    if self._held.endswith(s[:k])), default=0)
        cut = len(self._held) - keep
        out, self._held = self._held[:cut], self._held[cut:]
        return out, False

    def flush(self) -> str:
        out, self._held = self._held + self._decoder.decode(b"", final=True), ""
        return out


class ToolCallSplitter:
    """Feed streamed text; get back what may be spoken. ``calls()`` parses the calls at the end.

    Text is held back while it could be the start of ``<tool_call>``; from that tag on,
    everything belongs to the calls. An answer that opens with ``{`` is a bare JSON call."""

    def __init__(self) -> None:
        self._pending = ""
        self._started = False  # something visible was spoken or held
        self._calls_text: str | None = None

    def feed(self, text: str) -> str:
        if self._calls_text is not None:
            self._calls_text += text
            return ""
        self._pending += text
        if not self._started and (lead := self._pending.lstrip()):
            self._started = True
            if lead.startswith("{"):
                self._calls_text, self._pending = lead, ""
                return ""
        if (at := self._pending.find(OPEN)) >= 0:
            spoken, self._calls_text = self._pending[:at], self._pending[at:]
            self._pending = ""
            return spoken
        keep = next((n for n in range(min(len(OPEN) - 1, len(self._pending)), 0, -1)
                     if OPEN.startswith(self._pending[-n:])), 0)
        if not self._started:
            keep = len(self._pending)  # only spaces so far
        spoken = self._pending[:len(self._pending) - keep]
        self._pending = self._pending[len(spoken):]
        return spoken

    def flush(self) -> str:
        """Text held back at the end of the answer (it was not a tag after all)."""
        rest, self._pending = self._pending, ""
        return rest

    def calls(self) -> list[ToolCall]:
        """The calls written, each parsed; a block that does not parse is dropped."""
        if self._calls_text is None:
            return []
        text = self._calls_text
        blocks = ([b.split(CLOSE)[0] for b in text.split(OPEN)[1:]] if OPEN in text
                  else text.split("\n"))
        out = []
        for block in blocks:
            call = _parse_call(block.strip())
            if call is not None:
                out.append(ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=call[0],
                                    arguments=json.dumps(call[1])))
        return out


def _parse_call(body: str) -> tuple[str, dict[str, Any]] | None:
    for candidate in (body, body[1:-1] if body.startswith("{{") else None):
        if not candidate:
            continue
        try:
            call = json.loads(candidate)
            return str(call["name"]), dict(call.get("arguments") or {})
        except (ValueError, KeyError, TypeError):
            continue
    return None


Formatter = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None],
                    tuple[str, tuple[str, ...], bool]]


def chat_formatter(llama: Any) -> Formatter:
    """The model's own chat template (GGUF metadata), as ``create_chat_completion`` uses it;
    ChatML when the file has none. Tools go to a template that lists them itself; otherwise
    their description is added to the system message (``local_decoding``)."""
    from llama_cpp import llama_chat_format

    template = llama.metadata.get("tokenizer.chat_template")
    if template:
        model = llama_model(llama)
        eos, bos = model.token_eos(), model.token_bos()
        formatter: Any = llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=model.token_get_text(eos) if eos != -1 else "",
            bos_token=model.token_get_text(bos) if bos != -1 else "",
            stop_token_ids=[eos])
    else:
        formatter = llama_chat_format.format_chatml

    lists_tools = bool(template) and "tools" in template

    def format_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                      ) -> tuple[str, tuple[str, ...], bool]:
        """The prompt text, its stop strings, and whether a BOS token must be added."""
        messages = template_messages(messages)
        if tools and not lists_tools:
            if messages and messages[0].get("role") == "system":
                messages = [{**messages[0], "content": str(messages[0].get("content") or "")
                             + tools_system_text(tools)}, *messages[1:]]
            else:
                messages = [{"role": "system", "content": tools_system_text(tools).strip()},
                            *messages]
            tools = None
        result = formatter(messages=messages, tools=tools) if tools else formatter(
            messages=messages)
        stop = result.stop or ()
        stops = (stop,) if isinstance(stop, str) else tuple(stop)
        return result.prompt, stops, not result.added_special

    return format_prompt
