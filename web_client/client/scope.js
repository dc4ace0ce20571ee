// scope.js: the timers and waiters of one connection attempt. Each attempt is an epoch; ending
// it clears its timers and rejects its waiters, so nothing of a dead connection acts later.

import { VoiceClientError } from "./errors.js";

/**
 * @typedef {object} Waiter
 * @property {number} epoch the connection it waits on
 * @property {(msg: object) => boolean} match
 * @property {(msg: object) => void} resolve
 * @property {(err: Error) => void} reject
 */

export class ConnectionScope {
  /** @param {{timeoutMs: number}} opts how long `waitFor` and `withTimeout` wait */
  constructor(opts) {
    this.timeoutMs = opts.timeoutMs;
    /** The current connection attempt; older epochs are superseded. */
    this.epoch = 0;
    /** @type {Set<ReturnType<typeof setTimeout>>} */
    this._timers = new Set();
    /** @type {Set<Waiter>} */
    this._waiters = new Set();
  }

  /** Start a new epoch (a new connection attempt) and return it. */
  begin() {
    this.epoch += 1;
    return this.epoch;
  }

  /** End the current epoch: clear every timer, reject every waiter with CLOSED. */
  end() {
    this.epoch += 1;
    for (const t of this._timers) clearTimeout(t);
    this._timers.clear();
    for (const w of this._waiters) w.reject(new VoiceClientError("CLOSED", "connection closed"));
    this._waiters.clear();
  }

  /** @param {number} epoch @returns {boolean} whether `epoch` is still the current one */
  current(epoch) {
    return epoch === this.epoch;
  }

  /** Throw CLOSED when `epoch` was superseded (an `await` came back to a dead connection). */
  check(epoch) {
    if (epoch !== this.epoch) throw new VoiceClientError("CLOSED", "superseded");
  }

  /** `setTimeout` that `end()` cancels. */
  later(fn, ms) {
    const t = setTimeout(() => {
      this._timers.delete(t);
      fn();
    }, ms);
    this._timers.add(t);
    return t;
  }

  /** Resolve with the next inbound message of `epoch` matching `match`; TIMEOUT otherwise. */
  waitFor(epoch, match, what) {
    return new Promise((resolve, reject) => {
      const waiter = { epoch, match, resolve, reject };
      this._waiters.add(waiter);
      this.later(() => {
        if (this._waiters.delete(waiter)) {
          reject(new VoiceClientError("TIMEOUT", `timed out waiting for ${what}`,
            { recoverable: true }));
        }
      }, this.timeoutMs);
    });
  }

  /** `promise`, or TIMEOUT after `timeoutMs`. */
  withTimeout(promise, what) {
    return new Promise((resolve, reject) => {
      this.later(() => reject(new VoiceClientError("TIMEOUT", `timed out waiting for ${what}`)),
        this.timeoutMs);
      promise.then(resolve, reject);
    });
  }

  /** Hand an inbound message of `epoch` to the waiters it matches. */
  deliver(msg, epoch) {
    for (const w of [...this._waiters]) {
      if (w.epoch === epoch && w.match(msg)) {
        this._waiters.delete(w);
        w.resolve(msg);
      }
    }
  }

  /** Reject the waiters of `epoch` with `error` (its connection failed). */
  fail(epoch, error) {
    for (const w of [...this._waiters]) {
      if (w.epoch === epoch) {
        this._waiters.delete(w);
        w.reject(error);
      }
    }
  }
}
