// Injected time and randomness (tests and benches may replace them).
import { randomBytes } from 'node:crypto';

export interface Clock {
  /** RFC 3339 UTC with exactly six fraction digits (CONTRACT §1). */
  iso(): string;
  monotonicMs(): number;
}

export interface Random {
  bytes(n: number): Buffer;
}

export const systemClock: Clock = {
  iso(): string {
    const us = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000));
    const ms = Number(us / 1000n);
    const frac = String(us % 1000000n).padStart(6, '0');
    return new Date(ms).toISOString().replace(/\.\d{3}Z$/, `.${frac}Z`);
  },
  monotonicMs: () => performance.now(),
};

export const systemRandom: Random = { bytes: (n) => randomBytes(n) };
