"""Typed input over WebRTC (issue 22, item 3): the answer is spoken on the audio track."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient

pytestmark = pytest.mark.slow


async def test_a_typed_question_is_answered_on_the_audio_track(url, rtc_llm):
    rtc_llm.add("The sea is salty because rivers carry minerals into it.")
    async with RtcClient(url) as client:
        await client.negotiate()
        await client.send({"type": "user-text", "text": "Why is the sea salty?"})
        transcript = await client.wait_for("transcript", timeout=scaled(30))
        assert transcript == {"type": "transcript", "text": "Why is the sea salty?",
                              "isFinal": True}
        await client.wait_for("tts-complete", timeout=scaled(60))
        start = client.first_time("tts-start")
        assert start is not None
        heard = client.heard_between(start, start + 10.0)
        assert len(heard) > 48_000 * 0.5 and np.abs(heard).max() > 1000  # spoken on the track
        assert not client.messages("tts-chunk")  # not as messages
