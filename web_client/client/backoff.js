// backoff.js: the reconnect delay policy (pure).

/**
 * Exponential backoff with jitter: delay n (from 0) is min(max, base * factor^n) plus up to
 * `jitter` of it at random. `next()` returns null once `maxRetries` delays were handed out.
 */
export class Backoff {
  /**
   * @param {{baseMs?: number, maxMs?: number, factor?: number, jitter?: number,
   *   maxRetries?: number, random?: () => number}} [opts]
   */
  constructor(opts = {}) {
    this.baseMs = opts.baseMs ?? 500;
    this.maxMs = opts.maxMs ?? 15000;
    this.factor = opts.factor ?? 2;
    this.jitter = opts.jitter ?? 0.3;
    this.maxRetries = opts.maxRetries ?? 10;
    this.random = opts.random ?? Math.random;
    this.attempt = 0;
  }

  /** @returns {number | null} the next delay in ms, or null when retries are exhausted */
  next() {
    if (this.attempt >= this.maxRetries) return null;
    const raw = Math.min(this.maxMs, this.baseMs * this.factor ** this.attempt);
    this.attempt += 1;
    return Math.round(raw + raw * this.jitter * this.random());
  }

  reset() {
    this.attempt = 0;
  }
}
