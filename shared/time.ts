// The one timestamp form the service emits (docs/PROOF_FORMAT.md "Encodings"): RFC 3339 UTC with
// exactly six fraction digits and `Z`, e.g. 2026-11-21T22:05:00.123456Z.
// Isomorphic: no Node imports.

/** Formats epoch milliseconds; a fractional part gives the microseconds (truncated). */
export function isoMicros(epochMs: number): string {
  const ms = Math.floor(epochMs);
  const micros = Math.min(999, Math.floor((epochMs - ms) * 1000));
  // toISOString ends in ".mmmZ"; keep the milliseconds, append the microseconds.
  return `${new Date(ms).toISOString().slice(0, -1)}${String(micros).padStart(3, '0')}Z`;
}

/** Wall-clock now with microseconds, from the high-resolution timer (one time source). */
export function nowIsoMicros(): string {
  return isoMicros(performance.timeOrigin + performance.now());
}

/** p, or a rejection with `message` once `ms` have passed (the timer is cleared either way). */
export async function within<T>(p: Promise<T>, ms: number, message = 'timeout'): Promise<T> {
  let t: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, rej) => {
        t = setTimeout(() => rej(new Error(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(t);
  }
}
