"""A short run of the soak benchmark (bench/soak.py) in CI: 6 WebSocket sessions for 15 s
against a real server process with real STT/TTS and a scripted LLM. Zero errors and zero leaked
asyncio tasks are exact requirements; memory gets a generous bound because 15 s is mostly
warm-up (the 10-minute, 20-session run targets < 5 % growth)."""

from __future__ import annotations

import pytest

from bench.soak import run_soak


@pytest.mark.slow
async def test_short_soak_has_no_error_no_leak_and_bounded_memory() -> None:
    result = await run_soak(sessions=6, duration_s=15, think_s=0.5, reconnect_every=3,
                            sample_every_s=2.0, warmup_s=7)
    assert result["turns"] >= 6, result
    assert result["reconnects"] >= 1, result
    assert result["errors"] == {}, result["errors"]
    assert result["server_errors_by_code"] == {}, result["server_errors_by_code"]
    assert result["tasks"]["leaked"] <= 0, result["tasks"]
    assert result["rss_growth_pct"] < 15, result["series"]
