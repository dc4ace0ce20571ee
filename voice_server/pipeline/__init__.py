"""Per-session audio pipeline: audio utilities, VAD, STT, TTS, sentence chunking and the
cancellable turn (LLM -> TTS)."""
