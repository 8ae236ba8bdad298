// Verifies many JSON lines on every core: this thread verifies too, beside
// one worker thread per other core. Output order is input order.
import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { createNodeCrypto } from '../shared/node/crypto-node.js';
import type { TrustManifest } from '../shared/proof/index.js';
import { verifyLine, type LineOutcome, type VerifySettings } from './verify-input.js';

/** Below this many lines one thread is faster than starting workers. */
export const PARALLEL_MIN_LINES = 2000;
// About 40 ms of work per chunk: small enough to balance the end of a batch,
// large enough that messages cost nothing beside it.
const CHUNK_LINES = 250;
const MIN_CHUNK_LINES = 16;
/** Chunks a worker holds at once, so that it never waits for this thread (busy with its own chunk) to send the next. */
const IN_FLIGHT = 2;

export interface BatchOptions {
  manifest?: TrustManifest;
  /** Threads in all, this one included; default: available parallelism. 1 = this thread alone. */
  workers?: number;
  cacheKeys?: boolean;
}

interface Chunk {
  start: number;
  end: number;
}

export async function verifyLines(lines: string[], labels: string[], opts: BatchOptions = {}): Promise<LineOutcome[]> {
  const threads = Math.max(1, Math.min(opts.workers ?? availableParallelism(), Math.ceil(lines.length / CHUNK_LINES)));
  const settings: VerifySettings = {
    crypto: createNodeCrypto({ cacheKeys: Boolean(opts.cacheKeys) }),
    ...(opts.manifest ? { manifest: opts.manifest } : {}),
  };
  const verifyRange = (c: Chunk, into: LineOutcome[]): void => {
    for (let i = c.start; i < c.end; i++) into[i] = verifyLine(lines[i]!, labels[i]!, settings);
  };
  if (threads === 1 || (opts.workers === undefined && lines.length < PARALLEL_MIN_LINES)) {
    const out: LineOutcome[] = new Array(lines.length);
    verifyRange({ start: 0, end: lines.length }, out);
    return out;
  }

  const outcomes: LineOutcome[] = new Array(lines.length);
  let next = 0;
  // Chunks shrink towards the end so that every thread finishes at about the same time.
  const take = (): Chunk | undefined => {
    if (next >= lines.length) return undefined;
    const size = Math.max(MIN_CHUNK_LINES, Math.min(CHUNK_LINES, Math.ceil((lines.length - next) / (threads * 4))));
    const c = { start: next, end: Math.min(lines.length, next + size) };
    next = c.end;
    return c;
  };

  const url = new URL('./verify-worker.js', import.meta.url);
  let failure: unknown;
  const workersDone = Promise.all(
    Array.from(
      { length: threads - 1 },
      () =>
        new Promise<void>((resolve, reject) => {
          const w = new Worker(url, { workerData: { manifest: opts.manifest, cacheKeys: Boolean(opts.cacheKeys) } });
          const sent: Chunk[] = [];
          const send = (): void => {
            const c = take();
            if (c === undefined) return;
            sent.push(c);
            w.postMessage({ lines: lines.slice(c.start, c.end), labels: labels.slice(c.start, c.end) });
          };
          w.on('message', (got: LineOutcome[]) => {
            const c = sent.shift()!;
            for (let i = 0; i < got.length; i++) outcomes[c.start + i] = got[i]!;
            send();
            if (sent.length === 0) void w.terminate().then(() => resolve());
          });
          const fail = (err: unknown): void => {
            failure = err;
            reject(err);
          };
          w.on('error', fail);
          // Terminated only once it holds no chunk: an exit with chunks in hand lost them.
          w.on('exit', (code) => {
            if (sent.length > 0) fail(new Error(`verify worker exited with ${code} before finishing its lines`));
          });
          for (let k = 0; k < IN_FLIGHT; k++) send();
          if (sent.length === 0) void w.terminate().then(() => resolve());
        }),
    ),
  );
  // A worker's failure is thrown below; handled here so it is not an unhandled rejection meanwhile.
  workersDone.catch(() => undefined);
  // This thread takes chunks too, and yields between them so that workers' results are taken in and refilled.
  for (let c = take(); c !== undefined && failure === undefined; c = take()) {
    verifyRange(c, outcomes);
    await yieldToLoop();
  }
  await workersDone;
  return outcomes;
}
