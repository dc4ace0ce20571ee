"""Text-only sidecar protocols served over the one ``llm/`` layer."""
