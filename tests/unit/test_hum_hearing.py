"""Speech over the agent, heard as the barge-in judge hears it (server/listening.py): the
server's Whisper in its worker, told a hum came before (``HUM_PROMPT``). A hum in our Piper
voice must read as an acknowledgement and a short real interruption must not. Unprompted,
tiny.en wrote three of these hums as "And Emma.", "and may Chen." and "Damn.", and the agent
was cut off by them (the turn-taking benchmark's false barge-ins)."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.compute import ComputePool
from voice_server.pipeline.audio import resample
from voice_server.pipeline.barge_in import HUM_PROMPT, acknowledges
from voice_server.pipeline.stt import Hearing, WhisperSTT
from voice_server.pipeline.tts import default_piper_voice

pytestmark = pytest.mark.slow

HUMS = ["Mm-hmm.", "Mm-hmm", "Mhm.", "Hmm."]
INTERRUPTIONS = ["Stop.", "Wait.", "No.", "Hold on.", "What?", "Go back.",
                 "Can you repeat that?"]


def _piper(texts: list[str]) -> dict[str, np.ndarray]:
    """Each text in our Piper voice without its random variation (noise scales 0), so every
    run hears the same audio; 16 kHz, at most the 0.6 s the judge has heard by then."""
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(str(default_piper_voice()))
    steady = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    out = {}
    for text in texts:
        pcm = np.concatenate([chunk.audio_int16_array.reshape(-1)
                              for chunk in voice.synthesize(text, syn_config=steady)])
        out[text] = resample(pcm, voice.config.sample_rate, 16000)[:int(0.6 * 16000)]
    return out


async def test_a_hum_over_the_agent_is_an_acknowledgement_and_a_word_is_not():
    clips = _piper(HUMS + INTERRUPTIONS)
    async with ComputePool(1) as pool:
        stt = WhisperSTT(pool)
        await stt.load()
        try:
            heard = {text: await stt.hear(pcm, prompt=HUM_PROMPT) for text, pcm in clips.items()}
            unprompted = {text: await stt.hear(clips[text]) for text in HUMS}
        finally:
            await stt.aclose()

    def acknowledged(hearing: Hearing) -> bool:  # as listening.py's judge decides
        return acknowledges(hearing.text, hearing.alternatives)

    assert all(acknowledged(heard[text]) for text in HUMS), heard
    assert not any(acknowledged(heard[text]) for text in INTERRUPTIONS), heard
    # the prompt is what tells them apart: without it most hums read as words
    assert sum(not acknowledged(hearing) for hearing in unprompted.values()) >= 2, unprompted
