// npm run bench:verify-memory — what one POST /v1/verify of a large
// AuditRecord costs in memory and time: records of 1,000 to 20,000 execs in
// the shape the service records them, each verified in a fresh child process
// (body bytes -> string -> JSON.parse -> verifyProof, as the route does).
// Prints figures per body size and the ratio of memory to body bytes, which
// sizes CAPSULE_VERIFY_MAX_BYTES and CAPSULE_VERIFY_INFLIGHT_BYTES
// (docs/PERFORMANCE.md). Asserts nothing.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { emitRecord, generateEphemeralKey, verifyProof, type ActivityEvent } from '../shared/proof/index.js';
import { createNodeCrypto } from '../shared/node/crypto-node.js';

const hash = (): string => `sha512:${randomBytes(64).toString('hex')}`;
const at = (i: number): string => new Date(Date.UTC(2026, 10, 21, 22) + i).toISOString().replace('Z', '000Z');

/** A record of `execs` exec pairs, fields as control-plane/service/capsules.ts writes them. */
function body(execs: number): string {
  const activity: ActivityEvent[] = [
    { seq: 1, type: 'CapsuleStarted', at: at(0), data_classification: 'PHI', jurisdiction: 'EU', region: 'local' },
  ];
  for (let i = 0; i < execs; i++) {
    const n = activity.length;
    activity.push({
      seq: n + 1,
      type: 'ExecutionStarted',
      at: at(2 * i + 1),
      command_hash: hash(),
      input_size_bytes: 5,
      timeout_seconds: 300,
    });
    activity.push({
      seq: n + 2,
      type: 'ExecutionCompleted',
      at: at(2 * i + 2),
      exit_code: 0,
      duration_ms: 12,
      timed_out: false,
      stdout_hash: hash(),
      stderr_hash: hash(),
    });
  }
  activity.push({
    seq: activity.length + 1,
    type: 'DestructionInitiated',
    at: at(2 * execs + 1),
    trigger: 'customer_request',
  });
  const evidence = Array.from({ length: 8 }, (_, i) => ({ performed: true, step: i + 1, observed: hash() }));
  const record = emitRecord(
    {
      capsule_id: 'cap_0123456789abcdef01234567',
      created_at: at(0),
      destroyed_at: at(2 * execs + 2),
      evidence,
      activity,
      capsule_context: { jurisdiction: 'EU', data_classification: 'PHI' },
      termination: { trigger: 'customer_request', command_was_running: false },
    },
    { mode: 'ephemeral', key: generateEphemeralKey((n) => new Uint8Array(randomBytes(n))) },
  );
  return JSON.stringify({ cdp: record });
}

interface Measured {
  bytes: number;
  valid: boolean;
  ms: number;
  heapParsed: number;
  heapPeak: number;
  rss: number;
}

/** Child: verify one body file as the route does; print bytes and memory growth. */
function child(file: string): void {
  const gc = (globalThis as { gc?: () => void }).gc!;
  const raw = readFileSync(file); // the bytes as received
  gc();
  const heap0 = process.memoryUsage().heapUsed;
  const rss0 = process.resourceUsage().maxRSS * 1024;
  const t0 = performance.now();
  const value = JSON.parse(raw.toString('utf8')) as { cdp: unknown };
  const heapParsed = process.memoryUsage().heapUsed - heap0;
  const r = verifyProof(value.cdp, { crypto: createNodeCrypto() });
  const ms = performance.now() - t0;
  const heapPeak = process.memoryUsage().heapUsed - heap0; // no GC ran in between: parse + verify garbage included
  const rss = process.resourceUsage().maxRSS * 1024 - rss0;
  process.stdout.write(JSON.stringify({ bytes: raw.length, valid: r.valid, ms, heapParsed, heapPeak, rss }) + '\n');
}

if (process.argv[2] === '--child') child(process.argv[3]!);
else {
  const dir = mkdtempSync(join(tmpdir(), 'bench-verify-mem-'));
  const self = fileURLToPath(import.meta.url);
  const mib = (n: number): string => (n / 1048576).toFixed(1).padStart(6);
  console.log(
    'execs  body MiB  verify ms  heap after parse MiB (x body)  heap parse+verify MiB (x body)  max RSS growth MiB (x body)',
  );
  try {
    for (const execs of [1000, 5000, 20000]) {
      const file = join(dir, `${execs}.json`);
      writeFileSync(file, body(execs));
      const out = spawnSync(process.execPath, ['--expose-gc', self, '--child', file], { encoding: 'utf8' });
      if (out.status !== 0) throw new Error(out.stderr);
      const m = JSON.parse(out.stdout) as Measured;
      const x = (n: number): string => `${mib(n)} (${(n / m.bytes).toFixed(1)}x)`;
      console.log(
        `${String(execs).padStart(5)}  ${mib(m.bytes)}  ${m.ms.toFixed(0).padStart(9)}  ${x(m.heapParsed).padStart(29)}  ${x(m.heapPeak).padStart(30)}  ${x(m.rss).padStart(27)}${m.valid ? '' : '  NOT VALID'}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
