// Injected time and randomness (tests and benches may replace them).
import { randomBytes } from 'node:crypto';
import { nowIsoMicros } from '../shared/time.js';

export interface Clock {
  /** RFC 3339 UTC with exactly six fraction digits (docs/PROOF_FORMAT.md "Encodings"). */
  iso(): string;
  monotonicMs(): number;
}

export interface Random {
  bytes(n: number): Buffer;
}

export const systemClock: Clock = {
  iso: nowIsoMicros,
  monotonicMs: () => performance.now(),
};

export const systemRandom: Random = { bytes: (n) => randomBytes(n) };
