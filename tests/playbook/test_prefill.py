"""A playbook turn's first request read ahead while the caller speaks
(``PlaybookResponder.prefill`` -> ``StageRequests.first`` -> ``LLMRouter.warm(save=False)``):
the request is the one the turn then sends, up to the caller's words; a remote endpoint is not
asked; the embedded model then reads only the words."""

from __future__ import annotations

import time

import pytest

from voice_server.llm import ChatRequest, LLMRouter
from voice_server.llm.local import LocalLlamaProvider
from voice_server.playbook import PlaybookResponder, load_playbook, load_playbook_text
from voice_server.playbook.collect import NOTE_NAME
from voice_server.playbook.requests import INTENT_NAME

from .conftest import PLAYBOOKS, scaled
from .support import Conversation


class Recording(LLMRouter):
    """The router, keeping the requests it is asked to read ahead."""

    warmed: list[tuple[ChatRequest, bool]]

    async def warm(self, request: ChatRequest, *, save: bool = True) -> bool:
        self.warmed.append((request, save))
        return await super().warm(request, save=save)


@pytest.fixture
def recording(router: LLMRouter) -> Recording:
    out = Recording(router.providers, default=router.default)
    out.warmed = []
    return out


async def test_a_note_of_the_caller_s_facts_is_read_up_to_their_words(fake, recording) -> None:
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "restaurant.yaml"),
                                 recording) as pb:
        call = Conversation(pb)
        await pb.prefill(call.context(""))  # greeting: an intent is asked first, and the
        [(greeting, _)] = recording.warmed  # booking's note may follow it
        assert greeting.response_format["json_schema"]["name"] == NOTE_NAME
        recording.warmed.clear()
        await call.turn("I'd like to book a table.")  # booking (a keyword), asks the party
        sent = len(fake.requests)
        await pb.prefill(call.context("For two"))
        [(ahead, save)] = recording.warmed
        assert not save and len(fake.requests) == sent  # kept for this turn; never remote
        await call.turn("For two people at eight.")
        note = fake.requests[sent]
        assert note["response_format"] == ahead.response_format
        assert note["messages"][:-1] == ahead.messages[:-1]  # the agent's question included
        assert ahead.messages[-2]["role"] == "assistant"
        assert ahead.messages[-1] == {"role": "user", "content": "For two"}


async def test_words_that_fire_a_transition_read_the_next_stage_s_request(fake, recording
                                                                          ) -> None:
    """"... book a table" moves the greeting to the booking stage (a keyword): its note is
    read ahead, with the greeting as the question the caller answers."""
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "restaurant.yaml"),
                                 recording) as pb:
        call = Conversation(pb, history=[{"role": "assistant", "content": "Luigi's, hello."}])
        await pb.prefill(call.context("Hello, I would like to book a table"))
        [(ahead, _)] = recording.warmed
        assert ahead.response_format is not None  # the booking stage's note of facts
        assert ahead.messages[-2] == {"role": "assistant", "content": "Luigi's, hello."}
        assert call.state == {}  # the session's state is untouched


async def test_behind_an_intent_check_the_notes_it_may_lead_to_are_read(fake, recording
                                                                       ) -> None:
    """The support playbook's ``advice`` stage asks an intent first ("ticket" or "done"): the
    note of the ``ticket`` stage, which follows the intent "ticket", is read ahead with the
    agent's last answer as its question (the intent check itself reads little more than the
    words), and so is the answer of the wrap-up, which "done" enters with the history
    cleared."""
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "support.yaml"), recording) as pb:
        advice = "Your line looks fine. Restart your router and tell me whether that helped."
        call = Conversation(pb, history=[{"role": "user", "content": "It's 1 2 3 4 5 6 7 8."},
                                         {"role": "assistant", "content": advice}],
                            state={"playbook": "support", "stage": "advice", "data": {
                                "account": "12345678", "category": "outage"}})
        await pb.prefill(call.context("I restarted"))
        assert not any(save for _, save in recording.warmed) and fake.requests == []
        [ahead, closing] = sorted((r for r, _ in recording.warmed),
                                  key=lambda r: r.response_format is None)
        assert ahead.response_format["json_schema"]["name"] == NOTE_NAME
        assert [m["role"] for m in closing.messages] == ["system", "system", "user"]
        assert ahead.messages[-2:] == [{"role": "assistant", "content": advice},
                                       {"role": "user", "content": "I restarted"}]
        assert call.state["stage"] == "advice"  # the session's state is untouched
        fake.add('{"intent": "ticket"}',
                 '{"account": null, "category": null, "summary": "still slow"}')
        reply, _, _ = await call.turn("I restarted the router and it is still slow.")
        intent, note = fake.requests[:2]
        assert intent["response_format"]["json_schema"]["name"] == INTENT_NAME
        assert note["messages"][:-1] == ahead.messages[:-1]
        assert reply.startswith("I'll open a ticket for you. Your ticket number is")
        # "done" instead: the wrap-up's answer is the one read ahead
        sent = len(fake.requests)
        call = Conversation(pb, history=call.history[:2], state={
            "playbook": "support", "stage": "advice",
            "data": {"account": "12345678", "category": "outage"}})
        fake.add('{"intent": "done"}', "You're welcome. Goodbye!")
        await call.turn("I restarted it and it works now, thanks.")
        assert fake.requests[sent + 1]["messages"][:-1] == closing.messages[:-1]


SHOP = """\
id: shop
initial_stage: greet
stages:
  greet: {system_prompt: "Greet the caller of the shop. Be brief.", tools: [lookup]}
tools:
  lookup:
    description: Look an order up
    parameters: {type: object, properties: {order: {type: string}}}
    handler: {python: "json:dumps"}
"""


async def test_a_stage_s_answer_is_read_up_to_the_words(fake, recording) -> None:
    async with PlaybookResponder(load_playbook_text(SHOP), recording) as pb:
        call = Conversation(pb)
        await call.turn("Hello.")
        sent = len(fake.requests)
        await pb.prefill(call.context("Where is my"))
        [(ahead, _)] = recording.warmed
        await call.turn("Where is my order?")
        answer = fake.requests[sent]
        assert answer["messages"][:-1] == ahead.messages[:-1]  # the history included
        assert answer["tools"] == ahead.tools
        assert ahead.messages[-1] == {"role": "user", "content": "Where is my"}


TABLES = """\
id: tables
initial_stage: booking
stages:
  booking:
    system_prompt: Take the table booking.
    collect:
      tool: book
      ask:
        name: Could you please tell me the name under which you would like the table to be
          booked this evening?
        party_size: For how many people would you like the table?
tools:
  book:
    description: Book a table
    parameters:
      type: object
      properties:
        name: {type: string, description: "the caller's name"}
        party_size: {type: integer, minimum: 1, description: number of people}
      required: [name, party_size]
    handler: {python: "json:dumps"}
"""


@pytest.mark.slow
async def test_the_embedded_model_then_reads_only_the_caller_s_words() -> None:
    """The agent asked a 20-token question; read ahead, the note of the caller's answer reads
    fewer tokens than that question has (the caller's words, the message's end and the JSON's
    opening)."""
    provider = LocalLlamaProvider(n_threads=2)
    router = LLMRouter({"local": provider}, default="local")
    try:
        async with PlaybookResponder(load_playbook_text(TABLES), router,
                                     timeout_s=scaled(60)) as pb:
            for request in pb.warm_requests():
                await router.warm(request)
            asked = pb.playbook.stages["booking"].collect.ask["name"]
            call = Conversation(pb, history=[{"role": "user", "content": "Four of us."},
                                             {"role": "assistant", "content": asked}])
            await pb.prefill(call.context(""))
            [note] = pb.requests.first(call.context("It's Anna."), time.time())
            assert note.response_format is not None
            usage = (await router.complete(note)).usage
            read = usage.input_tokens - usage.cached_tokens
            assert read < 20, usage
    finally:
        await router.aclose()
