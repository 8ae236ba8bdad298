// `npm run bench:signing`: destroy latency with a managed signing authority
// (key file stat-ed per signature, re-read on change) against the default
// fresh ephemeral key per proof, two control planes over one real runner in
// the same run, destroys interleaved so both see the same machine load. Then
// two-phase signing: proofs buffered while the key file does not parse, and
// how fast the sweeper's pass signs them once it is back. Figures are
// printed, never asserted (target: managed destroy p50 <= 1.1x ephemeral).
// Last, customer co-signing: exec p50 in capsules pinned to a Capsulefile
// with signing_config (a local mutual-TLS Ed25519 signer) against the same
// Capsulefile without it (target: unchanged within noise; signing is off the
// request path).
//   flags: --rounds=60 --buffered=50 --execs=200 --driver=sqlite (rounds and buffered at most 90: one Free account each)
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startRunner } from '../test/helpers/runner.js';
import { start, type Api, type Driver } from '../test/control-plane/harness.js';
import { pki, startSigner } from '../test/helpers/cosign-signer.js';

const arg = (name: string, dflt: string): string =>
  process.argv.find((x) => x.startsWith(`--${name}=`))?.slice(name.length + 3) ?? dflt;
const ROUNDS = Number(arg('rounds', '60'));
const BUFFERED = Number(arg('buffered', '50'));
const DRIVER = arg('driver', 'sqlite') as Driver;
const EXECS = Number(arg('execs', '200'));

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f1 = (x: number): string => x.toFixed(1);

function writeKey(path: string): void {
  const { privateKey } = generateKeyPairSync('ed25519');
  writeFileSync(path, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
}

async function create(api: Api, key: string): Promise<string> {
  const c = await api.req('POST', '/v1/capsules', { key, json: {} });
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
  return c.body.id as string;
}

/** Milliseconds of one DELETE; `expect` is the status it must answer. */
async function destroy(api: Api, key: string, id: string, expect = 200): Promise<number> {
  const t0 = performance.now();
  const d = await api.req('DELETE', `/v1/capsules/${id}`, { key });
  const ms = performance.now() - t0;
  if (d.status !== expect) throw new Error(`destroy: ${d.status} ${d.text.slice(0, 200)}`);
  return ms;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-signing-'));
  const keyPath = join(dir, 'v1.pem');
  writeKey(keyPath);
  const runner = await startRunner({ uidCount: 64 });
  const env = { CAPSULE_RATE_LIMITS: 'off', CAPSULE_SWEEP_INTERVAL_MS: '3600000' };
  const eph = await start(DRIVER, runner.client, env);
  const man = await start(DRIVER, runner.client, {
    ...env,
    CAPSULE_SIGNING_AUTHORITY_ID: 'bench',
    CAPSULE_SIGNING_KEY_FILES: `1:${keyPath}`,
  });
  try {
    const ka = (await eph.api.signup()).key;
    const kb = (await man.api.signup()).key;
    const times = { ephemeral: [] as number[], managed: [] as number[] };
    for (let i = 0; i < 5; i++) {
      await destroy(eph.api, ka, await create(eph.api, ka));
      await destroy(man.api, kb, await create(man.api, kb));
    }
    for (let i = 0; i < ROUNDS; i++) {
      // Alternate which goes first so neither always follows the other's teardown.
      const order = i % 2 === 0 ? (['ephemeral', 'managed'] as const) : (['managed', 'ephemeral'] as const);
      for (const mode of order) {
        const s = mode === 'ephemeral' ? eph : man;
        const k = mode === 'ephemeral' ? ka : kb;
        times[mode].push(await destroy(s.api, k, await create(s.api, k)));
      }
    }
    const e50 = pct(times.ephemeral, 50);
    const m50 = pct(times.managed, 50);
    console.log(`destroy (${DRIVER}, ${ROUNDS} each, interleaved, one runner):`);
    console.log(`  ephemeral  p50 ${f1(e50)} ms  p99 ${f1(pct(times.ephemeral, 99))} ms`);
    console.log(`  managed    p50 ${f1(m50)} ms  p99 ${f1(pct(times.managed, 99))} ms`);
    console.log(`  managed / ephemeral p50: ${(m50 / e50).toFixed(2)}x (target <= 1.1x)`);

    // Two-phase: the key stops parsing, destroys buffer their proofs, the key comes back.
    // A fresh account: the Free tier's proof quota (100 a month) stays out of the figures.
    const kc = (await man.api.signup()).key;
    writeFileSync(keyPath, 'not a key\n');
    const buffered: number[] = [];
    for (let i = 0; i < BUFFERED; i++) buffered.push(await destroy(man.api, kc, await create(man.api, kc), 503));
    writeKey(keyPath);
    const t0 = performance.now();
    const signed = await man.cp.services.destruction.signPending(BUFFERED);
    const ms = performance.now() - t0;
    if (signed !== BUFFERED) throw new Error(`signed ${signed} of ${BUFFERED} buffered proofs`);
    console.log(`two-phase (${BUFFERED} destroys while the key did not parse):`);
    console.log(`  buffered destroy (503) p50 ${f1(pct(buffered, 50))} ms  p99 ${f1(pct(buffered, 99))} ms`);
    console.log(`  phase 2: ${BUFFERED} proofs signed and stored in ${f1(ms)} ms (${f1(ms / BUFFERED)} ms each)`);
    await cosignOverhead(runner.client, dir);
  } finally {
    await man.close();
    await eph.close();
    await runner.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Exec p50 with and without co-signing, execs interleaved between the two capsules. */
async function cosignOverhead(runnerClient: Parameters<typeof start>[1], dir: string): Promise<void> {
  const p = pki(dir);
  p.ca('operator-ca');
  p.ca('customer-ca');
  p.leaf('operator', 'operator-ca', 'extendedKeyUsage=clientAuth\n');
  p.leaf('signer', 'customer-ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  const ed = generateKeyPairSync('ed25519');
  const signer = await startSigner(p.read('signer.key'), p.read('signer.pem'), p.read('operator-ca.pem'), {
    ed: ed.privateKey,
  });
  const s = await start(DRIVER, runnerClient, {
    CAPSULE_RATE_LIMITS: 'off',
    CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1',
    CAPSULE_COSIGN_CLIENT_CERT_FILE: p.path('operator.pem'),
    CAPSULE_COSIGN_CLIENT_KEY_FILE: p.path('operator.key'),
  });
  try {
    const key = (await s.api.signup()).key;
    const pinned = async (name: string, signing: Record<string, unknown> | null): Promise<string> => {
      const def = { name, runtime: 'sh', entrypoint: 'true', ...(signing ? { signing_config: signing } : {}) };
      const cf = await s.api.req('POST', '/v1/capsulefiles', { key, json: def });
      await s.api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key });
      const c = await s.api.req('POST', '/v1/capsules', { key, json: { capsulefile_id: cf.body.id } });
      if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
      return c.body.id as string;
    };
    const plain = await pinned('plain', null);
    const cosigned = await pinned('cosigned', {
      endpoint: signer.url('/ed'),
      algorithm: 'Ed25519',
      public_key: ed.publicKey.export({ format: 'pem', type: 'spki' }).toString(),
      ca_cert: p.read('customer-ca.pem'),
    });
    const times = { plain: [] as number[], cosigned: [] as number[] };
    for (let i = 0; i < EXECS; i++) {
      for (const [mode, id] of i % 2 === 0
        ? ([
            ['plain', plain],
            ['cosigned', cosigned],
          ] as const)
        : ([
            ['cosigned', cosigned],
            ['plain', plain],
          ] as const)) {
        const t0 = performance.now();
        const r = await s.api.req('POST', `/v1/capsules/${id}/exec`, { key, json: { command: 'true' } });
        times[mode].push(performance.now() - t0);
        if (r.status !== 200) throw new Error(`exec: ${r.status} ${r.text}`);
      }
    }
    const d = await s.api.req('DELETE', `/v1/capsules/${cosigned}`, { key });
    const att = (d.body.cdp.customer_attestations ?? []) as { signature?: string }[];
    await s.api.req('DELETE', `/v1/capsules/${plain}`, { key });
    const a = pct(times.plain, 50);
    const b = pct(times.cosigned, 50);
    console.log(`co-signing (${EXECS} execs each, interleaved, local mutual-TLS Ed25519 signer):`);
    console.log(`  exec p50 without ${f1(a)} ms, with ${f1(b)} ms: ${(b / a).toFixed(2)}x`);
    console.log(`  exec p99 without ${f1(pct(times.plain, 99))} ms, with ${f1(pct(times.cosigned, 99))} ms`);
    console.log(
      `  ${att.filter((x) => x.signature).length} of ${att.length} events co-signed (${signer.seen.length} signer calls)`,
    );
  } finally {
    await s.close();
    await signer.close();
  }
}

await main();
