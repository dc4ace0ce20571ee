"""The asyncio edge: HTTP routes + WebSocket signaling on one port, sessions, WebRTC."""
