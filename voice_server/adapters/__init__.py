"""Text-only sidecar protocols served over the one ``llm/`` layer.

Each sidecar replaces an existing service, "the original" in comments (each package's docstring
names its own): where the sidecar's spec is silent, it behaves as the original does, so that the
original's clients work unchanged.
"""
