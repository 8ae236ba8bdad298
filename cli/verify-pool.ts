// Verifies many JSON lines, across worker threads when there are enough of
// them to pay for the threads. Output order is input order.
import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { createNodeCrypto } from '../shared/node/crypto-node.js';
import type { TrustManifest } from '../shared/proof/index.js';
import { verifyLine, type LineOutcome } from './verify-input.js';

/** Below this many lines one thread is faster than starting workers. */
export const PARALLEL_MIN_LINES = 2000;
const CHUNK_LINES = 500;

export interface BatchOptions {
  manifest?: TrustManifest;
  /** Worker threads; default: available parallelism. 1 = in this thread. */
  workers?: number;
  cacheKeys?: boolean;
}

export async function verifyLines(lines: string[], labels: string[], opts: BatchOptions = {}): Promise<LineOutcome[]> {
  const workers = Math.max(1, Math.min(opts.workers ?? availableParallelism(), Math.ceil(lines.length / CHUNK_LINES)));
  if (workers === 1 || (opts.workers === undefined && lines.length < PARALLEL_MIN_LINES)) {
    const settings = {
      crypto: createNodeCrypto({ cacheKeys: Boolean(opts.cacheKeys) }),
      ...(opts.manifest ? { manifest: opts.manifest } : {}),
    };
    return lines.map((l, i) => verifyLine(l, labels[i]!, settings));
  }
  const outcomes: LineOutcome[] = new Array(lines.length);
  const chunks: { id: number; start: number; end: number }[] = [];
  for (let s = 0; s < lines.length; s += CHUNK_LINES)
    chunks.push({ id: chunks.length, start: s, end: Math.min(lines.length, s + CHUNK_LINES) });
  let next = 0;
  const url = new URL('./verify-worker.js', import.meta.url);
  await Promise.all(
    Array.from(
      { length: workers },
      () =>
        new Promise<void>((resolve, reject) => {
          const w = new Worker(url, { workerData: { manifest: opts.manifest, cacheKeys: Boolean(opts.cacheKeys) } });
          const feed = () => {
            const c = chunks[next++];
            if (c === undefined) {
              void w.terminate().then(() => resolve());
              return;
            }
            w.postMessage({ id: c.id, lines: lines.slice(c.start, c.end), labels: labels.slice(c.start, c.end) });
          };
          w.on('message', (m: { id: number; outcomes: LineOutcome[] }) => {
            const c = chunks[m.id]!;
            for (let i = 0; i < m.outcomes.length; i++) outcomes[c.start + i] = m.outcomes[i]!;
            feed();
          });
          w.on('error', reject);
          feed();
        }),
    ),
  );
  return outcomes;
}
