"""voice_server: a self-hosted real-time voice agent backend (llmrtc wire protocol v1)."""

__version__ = "0.1.0"
__all__ = ["__version__"]
