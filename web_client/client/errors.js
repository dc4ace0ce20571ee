// errors.js: the client's one error type, with the spec's (or the client's) error code.

/** An error with the server's (or this client's) error code, e.g. `SESSION_NOT_FOUND`. */
export class VoiceClientError extends Error {
  /**
   * @param {string} code spec error code, or a client code (CONNECTION_FAILED, MIC_DENIED,
   *   MIC_UNAVAILABLE, RECONNECT_FAILED, CLOSED, TIMEOUT, ORIGIN_REFUSED: the server runs but
   *   does not allow this page's origin, REFUSED: it runs and refused for another reason)
   * @param {string} message human-readable text
   * @param {{recoverable?: boolean}} [opts]
   */
  constructor(code, message, opts = {}) {
    super(message);
    this.name = "VoiceClientError";
    this.code = code;
    this.recoverable = opts.recoverable ?? false;
  }
}

/**
 * `err` as a VoiceClientError (kept when it is one, else given `code`).
 * @param {unknown} err @param {string} code @returns {VoiceClientError}
 */
export function toClientError(err, code) {
  if (err instanceof VoiceClientError) return err;
  return new VoiceClientError(code, err?.message ?? String(err));
}
