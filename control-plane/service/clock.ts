// Production clock and randomness; tests and benches may inject their own.
import { randomBytes } from 'node:crypto';
import type { Clock, Random } from '../domain/index.js';

/** RFC 3339 UTC with exactly six fraction digits (CONTRACT 1). */
export function isoMicros(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export const systemClock: Clock = { nowMs: () => Date.now(), nowIso: () => isoMicros(Date.now()) };
export const systemRandom: Random = (n) => new Uint8Array(randomBytes(n));

/** First instant of the UTC calendar month holding `ms`: the billing cycle start. */
export function cycleStart(ms: number): string {
  const d = new Date(ms);
  return isoMicros(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
}
