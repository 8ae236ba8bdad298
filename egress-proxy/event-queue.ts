// The bounded queue between a capsule's proxy and its recorder. The recorder
// (onEvent) may return a promise that settles once the event is stored; at
// most `max` events may be unsettled. Past that, events are dropped and
// counted; once the queue has drained to half, or at stop(), one
// ActivityTruncated event states how many and the first dropped type.
import type { ActivityTruncated, EgressEvent } from './events.js';

export class EventQueue {
  #pending = 0;
  #dropped = 0;
  #firstDropped = '';
  #callbackErrors = 0;

  constructor(
    private readonly max: number,
    private readonly sink: (e: EgressEvent) => unknown,
    private readonly nowIso: () => string,
  ) {}

  /** Events handed to the recorder and not yet settled. */
  get pending(): number {
    return this.#pending;
  }

  /** Recorder throws and rejections so far (should stay 0). */
  get callbackErrors(): number {
    return this.#callbackErrors;
  }

  /** Events dropped and not yet reported by an ActivityTruncated. */
  get dropping(): number {
    return this.#dropped;
  }

  emit(e: EgressEvent): void {
    // Once dropping, keep dropping until the queue drains: a hole then resumes, never interleaves.
    if (this.#dropped > 0 || this.#pending >= this.max) {
      if (this.#dropped === 0) this.#firstDropped = e.type;
      this.#dropped++;
      return;
    }
    this.#deliver(e);
  }

  /** Reports drops still unreported (stop(): the last events must precede the capsule's destruction). */
  flushTruncation(): void {
    if (this.#dropped === 0) return;
    const t: ActivityTruncated = {
      type: 'ActivityTruncated',
      at: this.nowIso(),
      dropped_events: this.#dropped,
      first_dropped_type: this.#firstDropped,
      reason: 'egress_event_queue_full',
    };
    this.#dropped = 0;
    this.#firstDropped = '';
    this.#deliver(t);
  }

  #deliver(e: EgressEvent): void {
    let r: unknown;
    try {
      r = this.sink(e);
    } catch {
      this.#callbackErrors++;
      return;
    }
    if (!(r instanceof Promise)) return;
    this.#pending++;
    r.then(
      () => this.#settled(),
      () => {
        this.#callbackErrors++;
        this.#settled();
      },
    );
  }

  #settled(): void {
    this.#pending--;
    if (this.#dropped > 0 && this.#pending <= this.max / 2) this.flushTruncation();
  }
}
