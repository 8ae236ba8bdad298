// npm run bench:verify — proofs verified per second on one core for the 2.1
// record vector, beside the bare node:crypto Ed25519 verify rate measured in
// the same run (the floor: one signature check per proof), and a multi-core
// JSON-lines batch figure. Prints figures; asserts nothing.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { availableParallelism, cpus } from 'node:os';
import { createPublicKey, verify as nodeVerify } from 'node:crypto';
import { verifyProof, nobleCrypto, fromBase64, type CryptoProvider } from '../shared/proof/index.js';
import { createNodeCrypto } from '../shared/node/crypto-node.js';
import { verifyLines } from '../cli/verify-pool.js';

const vectorPath = fileURLToPath(new URL('../../test/data/cdp-vectors/proofs/valid-2.1-record.json', import.meta.url));
const doc = JSON.parse(readFileSync(vectorPath, 'utf8')).document;
const text = JSON.stringify(doc);
const seconds = Number(process.env['BENCH_SECONDS'] ?? '') || 1.5; // bench-only knob, not service configuration
const rounds = 5;

const rawKey = fromBase64(doc.attestation.public_key.slice(7))!;
const sig = fromBase64(doc.attestation.signature.slice(7))!;
const msg = Buffer.from(doc.canonical_hash.slice(7), 'ascii');
const spki = Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), rawKey]);
const keyObject = createPublicKey({ key: spki, format: 'der', type: 'spki' });

/** Operations per second of f over about `seconds`. */
function rate(f: () => boolean, secs = seconds): number {
  let n = 0;
  const end = performance.now() + secs * 1000;
  const t0 = performance.now();
  while (performance.now() < end) {
    for (let i = 0; i < 50; i++) if (!f()) throw new Error('benchmark subject returned false');
    n += 50;
  }
  return n / ((performance.now() - t0) / 1000);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const uncached = createNodeCrypto();
const cached = createNodeCrypto({ cacheKeys: true });
const verifyWith = (c: CryptoProvider) => () => verifyProof(doc, { crypto: c }).valid;

const subjects: [string, () => boolean][] = [
  ['bare node:crypto Ed25519 verify (parsed KeyObject)', () => nodeVerify(null, msg, keyObject, sig)],
  ['bare node:crypto Ed25519 verify (DER key per call)', () => nodeVerify(null, msg, { key: spki, format: 'der', type: 'spki' }, sig)],
  ['verifyProof, node provider, uncached key', verifyWith(uncached)],
  ['verifyProof, node provider, cached KeyObject', verifyWith(cached)],
  ['JSON.parse + verifyProof, node provider, uncached', () => verifyProof(JSON.parse(text), { crypto: uncached }).valid],
];

async function main(): Promise<void> {
  console.log(`Proof verification benchmark: ${vectorPath.split('/').slice(-2).join('/')} (${text.length} bytes)`);
  console.log(`node ${process.version}, ${cpus()[0]?.model ?? 'cpu'} x${availableParallelism()}, ${rounds} interleaved rounds of ${seconds}s, median shown\n`);
  for (const [, f] of subjects) rate(f, 0.3); // warm up
  const samples = subjects.map(() => [] as number[]);
  for (let r = 0; r < rounds; r++) subjects.forEach(([, f], i) => samples[i]!.push(rate(f)));
  const med = samples.map(median);
  const bare = med[0]!;
  subjects.forEach(([name], i) => {
    const ratio = i === 0 ? '' : `  ${((med[i]! / bare) * 100).toFixed(1)}% of bare`;
    console.log(`${name.padEnd(52)} ${med[i]!.toFixed(0).padStart(7)} /s${ratio}`);
  });
  const noble = rate(verifyWith(nobleCrypto), Math.min(seconds, 1.5));
  console.log(`${'verifyProof, default @noble provider (isomorphic)'.padEnd(52)} ${noble.toFixed(0).padStart(7)} /s  ${((noble / bare) * 100).toFixed(1)}% of bare`);

  // Multi-core: a JSON-lines batch through the CLI's batch path (parse + verify per line).
  const n = 20000;
  const lines = Array.from({ length: n }, () => text);
  const labels = lines.map((_, i) => `line ${i + 1}`);
  for (const workers of [1, availableParallelism()]) {
    for (const cacheKeys of [false, true]) {
      const t0 = performance.now();
      const out = await verifyLines(lines, labels, { workers, cacheKeys });
      const secs = (performance.now() - t0) / 1000;
      const ok = out.every((o) => 'verdicts' in o && o.verdicts.every((v) => v.result.valid));
      if (!ok) throw new Error('batch result not all valid');
      console.log(`${`JSON-lines batch ${n} proofs, ${workers} thread(s), keys ${cacheKeys ? 'cached' : 'uncached'}`.padEnd(52)} ${(n / secs).toFixed(0).padStart(7)} /s  (${secs.toFixed(2)} s, ${((n / secs / bare) * 100).toFixed(0)}% of one-core bare)`);
    }
  }
}

main().catch((err: unknown) => {
  console.error(`bench:verify failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
