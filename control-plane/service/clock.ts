// Production clock and randomness; tests and benches may inject their own.
import { randomBytes } from 'node:crypto';
import type { Clock, Random } from '../domain/index.js';
import { isoMicros } from '../../shared/time.js';

export { isoMicros };

export const systemClock: Clock = { nowMs: () => Date.now(), nowIso: () => isoMicros(Date.now()) };
export const systemRandom: Random = (n) => new Uint8Array(randomBytes(n));

/** First instant of the UTC calendar month holding `ms`: the billing cycle start. */
export function cycleStart(ms: number): string {
  const d = new Date(ms);
  return isoMicros(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
}
