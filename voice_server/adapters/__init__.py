"""Text-only sidecar protocols served over the one ``llm/`` layer.

Each sidecar replaces an existing service, "the original" in comments (each package's docstring
names its own): where the sidecar's spec is silent, it behaves as the original does, so that the
original's clients work unchanged.

``SIDECARS`` is the one list of them: a sidecar's package under ``adapters/`` has a ``cli.py``
(``register(commands, sidecars)`` adds ``voice-server sidecar NAME`` and any commands of its
own) and the module named here, with its ``run_sidecar`` and the pydantic model of its options
(``launch`` starts it beside the voice server; ``kit`` has what they share).
"""

__all__ = ["SIDECARS"]

# name -> (module of run_sidecar and the options model, the options model); one line each
SIDECARS: dict[str, tuple[str, str]] = {
    "prompt": ("voice_server.adapters.prompt.server", "PromptSidecarConfig"),
    "caller": ("voice_server.adapters.caller.sidecar", "CallerSidecarConfig"),
    "broker": ("voice_server.adapters.broker.server", "BrokerSidecarConfig"),
    "host": ("voice_server.adapters.host.server", "HostSidecarConfig"),
}
