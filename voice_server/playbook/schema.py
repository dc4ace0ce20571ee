"""The playbook file format as pydantic models; ``playbook_json_schema()`` publishes it.

A playbook describes one agent: its stages (prompt, tools, tool choice, turn-taking policy), the
transitions between them (conditions + actions, ordered by ``priority``) and its tools (a JSON
Schema for the arguments and a handler: a Python callable or an HTTP webhook). Cross references
(stage and tool names) are checked by ``loader``, which also locates every error in the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    model_validator,
)

__all__ = [
    "CONDITION_KINDS",
    "PLACEHOLDER",
    "READ_BACK_PLACE",
    "Collect",
    "Condition",
    "Confirm",
    "Example",
    "Globals",
    "HttpHandler",
    "LLMOptions",
    "OnEnter",
    "Playbook",
    "PythonHandler",
    "Stage",
    "Tool",
    "ToolResultMatch",
    "Transition",
    "TurnTaking",
    "playbook_json_schema",
]

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$")]
Source = Name | Literal["*"]
ToolChoice = Literal["auto", "none", "required"] | dict[Literal["name"], Name]

# a transition's `set` value that takes the tool call's values: "${result.KEY}", "${args.NAME}"
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")
READ_BACK_PLACE = re.compile(r"\{(\w+)\}")  # an argument in ``collect.confirm.say``


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TurnTaking(_Model):
    """Per-stage voice turn-taking overrides; each numeric field overrides the server setting
    ``vad_<field>`` (``Settings.vad_end_silence_ms``...); unset fields keep the server's."""

    end_silence_ms: int | None = Field(None, ge=60, le=5000,
                                       description="silence that ends the user's turn")
    min_speech_ms: int | None = Field(None, ge=20, le=5000, description="voiced audio that "
                                      "confirms speech (and barges in)")
    aggressiveness: int | None = Field(None, ge=0, le=3, description="webrtcvad mode, 0..3")
    barge_in: bool | None = Field(None, description="may the user interrupt the agent")


class LLMOptions(_Model):
    """Model parameters; a stage's values override the playbook's globals."""

    model: str | None = Field(None, description="model name or alias known to the LLM router")
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1, le=8192)


class OnEnter(_Model):
    """What happens when a stage is entered."""

    say: str | None = Field(None, description="spoken before the stage's first answer")
    set: dict[str, Any] = Field(default_factory=dict, description="data stored in the session")


class Example(_Model):
    said: str = Field(min_length=1, description="what a caller might say")
    facts: dict[str, Any] = Field(default_factory=dict, description="the arguments it gives "
                                  "(leave out the ones it does not give)")


class Confirm(_Model):
    """The details read back before the tool is called; only a yes calls it."""

    say: str = Field(min_length=1, description="the read-back, a question: `{argument}` is its "
                     "value as spoken (a time '7:30 pm', a date 'tomorrow' or 'on Friday 4 "
                     "December'); an optional argument the caller did not give: nothing")
    change: str = Field("What should I change?", min_length=1,
                        description="said to a caller who says no without another value")
    spell: str = Field("Sorry, could you spell the {argument} for me?", min_length=1,
                       description="said to a caller who says no and gives a text again that "
                       "is heard as before (`{argument}`: its name)")


class Collect(_Model):
    """Slot filling: the engine gathers ``tool``'s arguments from what the caller says, asks
    for the missing ones and calls the tool itself once every required one is known (after
    the caller's yes to ``confirm``, when it is given)."""

    tool: Name = Field(description="the tool whose arguments are collected")
    ask: dict[Name, str] = Field(default_factory=dict, description="argument -> the question "
                                 "that asks for it; asked in this order")
    examples: list[Example] = Field(default_factory=list, description="callers' sentences and "
                                    "the arguments they give; shown to the model that notes "
                                    "them (include one that gives none)")
    confirm: Confirm | None = Field(None, description="read the details back and call the tool "
                                    "only on the caller's yes")


class Stage(_Model):
    system_prompt: str = Field("", description="appended to the global system prompt")
    tools: list[Name] = Field(default_factory=list, description="tools usable in this stage "
                              "(besides the global ones)")
    tool_choice: ToolChoice = Field("auto", description="auto | none | required | {name: TOOL}; "
                                    "forcing applies to the first tool round of a turn")
    max_turns: int | None = Field(None, ge=1, description="value used by `max_turns: true` "
                                  "transitions from this stage")
    timeout_s: float | None = Field(None, gt=0, description="value used by `timeout_s: true` "
                                    "transitions from this stage")
    turn_taking: TurnTaking | None = None
    llm: LLMOptions | None = None
    on_enter: OnEnter | None = None
    collect: Collect | None = Field(None, description="collect a tool's arguments from the "
                                    "caller, then call it (see docs/playbooks.md)")


class Globals(_Model):
    system_prompt: str = Field("", description="prompt shared by every stage")
    tools: list[Name] = Field(default_factory=list, description="tools usable in every stage")
    turn_taking: TurnTaking | None = None
    llm: LLMOptions | None = None
    max_tool_rounds: int = Field(3, ge=1, le=10, description="silent tool rounds per turn before "
                                 "the answer is forced")
    max_parallel_tools: int = Field(4, ge=1, le=16, description="tool calls run at once")
    intent_prompt: str | None = Field(None, description="instruction for intent classification")
    today: bool = Field(False, description="tell the model today's date (the server's clock) in "
                        "every request, and work out the dates of the days a caller names "
                        "('tomorrow', 'on Monday') in a `collect` stage: for tools that take "
                        "dates")


class ToolResultMatch(_Model):
    tool: Name
    ok: bool | None = Field(None, description="true: succeeded; false: failed; unset: either")
    match: dict[str, Any] = Field(default_factory=dict, description="values the result must "
                                  "hold (dotted keys reach into nested objects)")


class Condition(_Model):
    """Exactly one of the fields is set. ``keyword``, ``intent``, ``max_turns`` and ``timeout_s``
    are checked when a user turn starts; ``tool_called``/``tool_result`` after each tool call;
    ``llm_decision`` when the model calls the built-in ``playbook_transition`` tool."""

    keyword: list[str] | None = Field(None, min_length=1, description="words or phrases in the "
                                      "user's turn (case-insensitive, whole words)")
    intent: Name | None = Field(None, description="one of the playbook's `intents`")
    tool_called: Name | None = Field(None, description="the tool was called (any outcome)")
    tool_result: ToolResultMatch | None = None
    llm_decision: str | None = Field(None, min_length=1, description="when the model should "
                                     "move on; offered through the `playbook_transition` tool")
    max_turns: int | Literal[True] | None = Field(None, description="user turns spent in the "
                                                  "stage (true: the stage's max_turns)")
    timeout_s: float | Literal[True] | None = Field(None, description="seconds spent in the "
                                                    "stage (true: the stage's timeout_s)")

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if isinstance(data.get("keyword"), str):
                data = {**data, "keyword": [data["keyword"]]}
            set_kinds = [k for k in CONDITION_KINDS if data.get(k) is not None]
            if len(set_kinds) != 1 and all(k in CONDITION_KINDS for k in data):
                raise ValueError("expected exactly one condition among "
                                 + ", ".join(CONDITION_KINDS)
                                 + (f"; found {', '.join(set_kinds)}" if set_kinds else ""))
        return data

    @property
    def kind(self) -> str:
        return next(k for k in CONDITION_KINDS if getattr(self, k) is not None)


CONDITION_KINDS = ("keyword", "intent", "tool_called", "tool_result", "llm_decision",
                   "max_turns", "timeout_s")


class Transition(_Model):
    from_: Source | list[Source] = Field(alias="from",
                                         description="source stage(s), or '*' for any")
    to: Name | None = Field(None, description="target stage; unset: stay and only run actions")
    when: Condition
    priority: int = Field(0, description="higher is checked first; ties keep file order")
    say: str | None = Field(None, description="spoken when the transition fires")
    clear_history: bool = Field(False, description="forget the conversation so far")
    set: dict[str, Any] = Field(default_factory=dict, description="data stored in the session")
    reason: str | None = Field(None, description="sent in stage-change (default: the condition)")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def sources(self) -> list[str]:
        return [self.from_] if isinstance(self.from_, str) else list(self.from_)


class PythonHandler(_Model):
    python: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
                        description="'package.module:function'; a module path is looked up "
                        "beside the playbook file first, then on sys.path")
    timeout_s: float = Field(10.0, gt=0, le=600)
    options: dict[str, Any] = Field(default_factory=dict, description="passed as ctx.options")


class HttpSpec(_Model):
    url: str = Field(pattern=r"^https?://")
    method: Literal["GET", "POST", "PUT", "PATCH"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(10.0, gt=0, le=600)
    retries: int = Field(0, ge=0, le=5, description="extra attempts on connection errors and 5xx")


class HttpHandler(_Model):
    http: HttpSpec


def _handler_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "python" if "python" in value else "http" if "http" in value else None
    return "python" if isinstance(value, PythonHandler) else \
        "http" if isinstance(value, HttpHandler) else None


class Tool(_Model):
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object",
                                                                "properties": {}},
                                       description="JSON Schema of the arguments")
    handler: Annotated[
        Annotated[PythonHandler, Tag("python")] | Annotated[HttpHandler, Tag("http")],
        Discriminator(_handler_kind, custom_error_type="handler_kind",
                      custom_error_message="expected `python: module:function` or "
                                           "`http: {url: ...}`")]
    interruptible: bool = Field(True, description="false: the answer announcing this tool's "
                                "result cannot be cut off by barge-in")
    answer_from: str | None = Field(None, min_length=1, description="a key of the result whose "
                                    "text is the answer when the call succeeds: spoken as it "
                                    "is, without asking the model (exact numbers, and a "
                                    "request fewer)")
    offer_from: str | None = Field(None, min_length=1, description="with answer_from: a key of "
                                   "the result holding the argument values that answer offers "
                                   "(e.g. {time: '21:00'}); in a collect stage a caller's plain "
                                   "yes takes them")

    @model_validator(mode="after")
    def _offer_is_spoken(self) -> Tool:
        if self.offer_from is not None and self.answer_from is None:
            raise ValueError("offer_from needs answer_from: an offer the caller accepts must "
                             "be one the tool's own answer made")
        return self


class Playbook(_Model):
    """A multi-stage tool-calling agent (docs/playbooks.md)."""

    id: Name
    description: str = ""
    version: int | str | None = None
    initial_stage: Name
    greeting: str | None = Field(None, max_length=500, description="what the agent says when a "
                                 "phone call connects, before the caller speaks")
    globals: Globals = Field(default_factory=Globals)
    intents: dict[Name, str] = Field(default_factory=dict, description="intent name -> what it "
                                     "means; used by `intent` conditions")
    stages: dict[Name, Stage] = Field(min_length=1)
    transitions: list[Transition] = Field(default_factory=list)
    tools: dict[Name, Tool] = Field(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(None)

    @property
    def base_dir(self) -> Path | None:
        """The folder of the file it was loaded from (relative tool modules are found there)."""
        return self._base_dir

    def stage_tools(self, stage: str) -> list[str]:
        """Names of the tools usable in ``stage``: the globals first, no duplicates."""
        names = [*self.globals.tools, *self.stages[stage].tools]
        return list(dict.fromkeys(names))


def playbook_json_schema() -> dict[str, Any]:
    """The JSON Schema published as ``playbooks/schema.json`` (editors validate with it)."""
    schema = Playbook.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://voice-server.dev/schemas/playbook.json"
    schema["title"] = "voice_server playbook"
    return schema
