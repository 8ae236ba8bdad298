// The soak's victim: an ordinary account driving whole lifecycles (create,
// upload 1 KB, exec, download, destroy with a verified proof). It runs in its
// own worker thread, so that the attackers' driver (thousands of sockets, an
// SSE upstream pumping 400,000 events) never delays the victim's own
// measurements: what is measured is the service, not the measuring process.
import { spawnSync } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { Api } from '../control-plane/harness.js';
import { makeProbes } from './probes.js';

export interface VictimRun {
  baseUrl: string;
  key: string;
  /** Run this many lifecycles, or until this wall-clock time (ms since the epoch). */
  count?: number;
  until?: number;
}

export interface VictimResult {
  /** Milliseconds per completed lifecycle. */
  lifecycles: number[];
  /** Milliseconds per step (create, upload, exec, download, destroy). */
  steps: Record<string, number[]>;
  failures: string[];
  refusals: Record<string, number>;
  verified: number;
  /** The measuring thread's CPU priority: "realtime", or why it stayed at the normal one. */
  client: string;
}

/**
 * Puts the calling thread ahead of every capsule and service for a CPU (SCHED_RR 1; what it
 * starts runs at the normal priority). A customer's client runs on its own machine; here it
 * shares the node's two cores with the attackers' capsules, and at normal priority it waited
 * for a CPU before sending and after the answer: measured (stop 34), 9 of 14 victim steps over
 * 120 ms had 100-180 ms of their time outside the service's handling of the request.
 */
function realtime(): string {
  try {
    const tid = readlinkSync('/proc/thread-self').split('/').pop()!;
    const r = spawnSync('chrt', ['--rr', '--reset-on-fork', '--pid', '1', tid], { encoding: 'utf8' });
    return r.status === 0 ? 'realtime' : `normal (chrt: ${(r.stderr || String(r.error)).trim()})`;
  } catch (e) {
    return `normal (${(e as Error).message})`;
  }
}

/** Unmeasured lifecycles at the start of every victim thread. */
const WARMUP = 2;
/**
 * Lifecycles start at most this often. The victim is a Team account (policies/tiers.yaml:
 * 1,200 requests per minute) and a lifecycle is 5 requests: back to back on an idle node
 * (about 40 ms each) it ran into its own rate limit, and its 429s were counted as failures.
 * An ordinary account stays inside its limit: 5 requests per 300 ms is 1,000 a minute.
 */
const VICTIM_PACE_MS = 300;

async function drive(o: VictimRun): Promise<VictimResult> {
  const client = realtime();
  const api = new Api(o.baseUrl);
  const p = makeProbes();
  const steps: Record<string, number[]> = {};
  const step = async <T>(name: string, f: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    try {
      return await f();
    } finally {
      (steps[name] ??= []).push(performance.now() - t);
    }
  };
  const key = o.key;
  const lifecycle = async (): Promise<number | null> => {
    const t0 = performance.now();
    const c = await step('create', () =>
      p.call('victim create', () => api.req('POST', '/v1/capsules', { key, json: { ttl: 120 } })),
    );
    if (!c || c.status !== 201) {
      if (c) p.failures.push(`victim create: ${c.status} ${c.text.slice(0, 200)}`);
      return null;
    }
    const id = c.body.id as string;
    const up = await step('upload', () =>
      p.call('victim upload', () =>
        api.req('POST', `/v1/capsules/${id}/upload?filename=in.csv`, { key, raw: 'x'.repeat(1024) }),
      ),
    );
    const ex = await step('exec', () =>
      p.call('victim exec', () =>
        api.req('POST', `/v1/capsules/${id}/exec`, {
          key,
          json: { command: 'wc -c < /data/input/in.csv > /data/output/n.txt; cat /data/output/n.txt' },
        }),
      ),
    );
    if (ex?.status === 200 && ex.body.stdout.trim() !== '1024') p.failures.push(`victim exec: ${ex.body.stdout}`);
    const dl = await step('download', () =>
      p.call('victim download', () => api.req('GET', `/v1/capsules/${id}/output/n.txt`, { key })),
    );
    const d = await step('destroy', () =>
      p.call('victim destroy', () => api.req('DELETE', `/v1/capsules/${id}`, { key })),
    );
    p.checkDestroy('victim', d, ex?.status === 200 ? 1 : 0);
    if (up?.status !== 200 || ex?.status !== 200 || dl?.status !== 200) {
      p.failures.push(`victim lifecycle: upload ${up?.status} exec ${ex?.status} download ${dl?.status}`);
      return null;
    }
    return performance.now() - t0;
  };
  // The thread's first lifecycles pay its own start (module loading, JIT, the first connection):
  // measured, they made the idle p99 that of a cold client (about 300 ms against a 50 ms median).
  for (let i = 0; i < WARMUP; i++) await lifecycle();
  for (const k of Object.keys(steps)) delete steps[k];
  const lifecycles: number[] = [];
  let nextStart = performance.now();
  for (let i = 0; o.count !== undefined ? i < o.count : Date.now() < (o.until ?? 0); i++) {
    const wait = nextStart - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    // No catching up after a slow lifecycle: the next one starts a full pace after this one.
    nextStart = performance.now() + VICTIM_PACE_MS;
    const ms = await lifecycle();
    if (ms !== null) lifecycles.push(ms);
  }
  return { lifecycles, steps, failures: p.failures, refusals: p.refusals, verified: p.verified.count, client };
}

/** Runs the victim in a worker thread of its own and returns what it measured. */
export function runVictim(o: VictimRun): Promise<VictimResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: o, name: 'victim' });
    w.once('message', (r: VictimResult) => {
      resolve(r);
      void w.terminate();
    });
    w.once('error', reject);
  });
}

if (!isMainThread && (workerData as VictimRun | undefined)?.baseUrl) {
  void drive(workerData as VictimRun).then((r) => parentPort!.postMessage(r));
}
