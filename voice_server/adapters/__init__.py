"""Sidecar adapters: other protocols in front of the same ``voice_server.llm`` layer."""
