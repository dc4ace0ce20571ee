"""WebRTC media over aiortc (issue 3). Not wired yet: offers are answered WEBRTC_UNAVAILABLE."""

from __future__ import annotations

from typing import Any

__all__ = ["rtc_factory"]


def rtc_factory(server: Any) -> None:
    return None
