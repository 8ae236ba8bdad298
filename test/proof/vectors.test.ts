// Every golden vector, exactly, with both crypto providers.
import t from 'tap';
import {
  verifyProof,
  nobleCrypto,
  canonicalize,
  computeChain,
  activityRoot,
  STEPS,
  GENESIS_HEX,
  signWebhook,
  verifyWebhookSignature,
  type CryptoProvider,
} from '../../shared/proof/index.js';
import { nodeCrypto, createNodeCrypto } from '../../shared/node/crypto-node.js';
import { proofVectors, readJson, withoutVerifiedAt } from './helpers.js';
import { toHex, utf8 } from '../../shared/proof/encoding.js';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const providers: [string, CryptoProvider][] = [
  ['noble', nobleCrypto],
  ['node', nodeCrypto],
  ['node-cached', createNodeCrypto({ cacheKeys: true })],
  ['node-der', createNodeCrypto({ keyImport: 'der-spki' })],
  ['node-der-cached', createNodeCrypto({ keyImport: 'der-spki', cacheKeys: true })],
];

const vectors = proofVectors();

t.test('there are proof vectors of every kind', async (t) => {
  t.ok(vectors.length >= 32, `${vectors.length} proof vectors`);
  t.ok(vectors.some((v) => v.expect['valid'] === true));
  t.ok(vectors.some((v) => v.expect['valid'] === false));
});

for (const [pname, crypto] of providers) {
  t.test(`proof vectors, ${pname} provider`, async (t) => {
    for (const v of vectors) {
      const r = verifyProof(v.document, {
        crypto,
        ...(v.manifest ? { manifest: v.manifest } : {}),
        now: () => '2026-11-22T00:00:00.000000Z',
      });
      t.same(withoutVerifiedAt(r), v.expect, `${v.name}: ${v.description}`);
      t.strictSame(JSON.parse(JSON.stringify(withoutVerifiedAt(r))), v.expect, `${v.name}: exact members`);
      t.equal(r.verified_at, '2026-11-22T00:00:00.000000Z', `${v.name}: verified_at from the injected clock`);
    }
  });
}

t.test('managed vectors without a manifest skip stage 6 and verify', async (t) => {
  for (const v of vectors.filter((x) => x.manifest)) {
    const r = verifyProof(v.document, { crypto: nodeCrypto });
    t.equal(r.valid, true, v.name);
  }
});

t.test('default provider is noble and gives the same verdicts', async (t) => {
  for (const v of vectors) {
    const r = verifyProof(v.document, v.manifest ? { manifest: v.manifest } : {});
    t.same(withoutVerifiedAt(r), v.expect, v.name);
    t.match(r.verified_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'system clock in six-digit form');
  }
});

t.test('JCS vectors', async (t) => {
  const jcs = readJson('jcs.json');
  for (const c of jcs.cases) {
    const out = canonicalize(c.input);
    t.equal(out, c.canonical);
    for (const [pname, p] of providers) t.equal('sha512:' + toHex(p.sha512(utf8(out))), c.sha512, `sha512 ${pname}`);
  }
});

t.test('chain vectors', async (t) => {
  const chain = readJson('chain.json');
  t.same(
    chain.steps,
    STEPS.map(({ step, subsystem, operation, method }) => ({ step, subsystem, operation, method })),
    'step table',
  );
  t.equal(GENESIS_HEX, toHex(nobleCrypto.sha512(new Uint8Array(0))), 'genesis is SHA-512("")');
  for (const c of chain.cases) {
    for (const [pname, p] of providers)
      t.same(computeChain(c.destroyed_at, p), c.chain_hashes, `${c.destroyed_at} ${pname}`);
  }
});

t.test('merkle vectors', async (t) => {
  const m = readJson('merkle.json');
  for (const c of m.cases) {
    for (const [pname, p] of providers)
      t.equal(activityRoot(c.events, p), c.activity_root, `${c.events.length} events ${pname}`);
  }
});

t.test('webhook vector', async (t) => {
  const w = readJson('webhook.json');
  t.equal(signWebhook(w.secret, w.timestamp, w.body), w.header);
  t.equal(signWebhook(w.secret, w.timestamp, utf8(w.body)), w.header, 'raw bytes body');
  t.same(verifyWebhookSignature(w.header, w.secret, w.body, w.timestamp + 10), { ok: true, timestamp: w.timestamp });
  t.same(verifyWebhookSignature(w.header, w.secret, w.body + ' ', w.timestamp), { ok: false, reason: 'mismatch' });
  t.same(verifyWebhookSignature(w.header, 'whsec_other', w.body, w.timestamp), { ok: false, reason: 'mismatch' });
  t.same(verifyWebhookSignature(w.header, w.secret, w.body, w.timestamp + 301), { ok: false, reason: 'stale' });
  t.same(verifyWebhookSignature('v1=abc', w.secret, w.body, w.timestamp), { ok: false, reason: 'malformed' });
  t.same(verifyWebhookSignature(`t=${w.timestamp}`, w.secret, w.body, w.timestamp), { ok: false, reason: 'malformed' });
  const rotated = `${w.header},v1=${'0'.repeat(64)}`;
  t.equal(verifyWebhookSignature(rotated, w.secret, w.body, w.timestamp).ok, true, 'any matching v1 value');
});

t.test('providers agree on edge keys and signatures', async (t) => {
  const doc = readJson('proofs/valid-2.1-record.json').document;
  const msg = utf8(doc.canonical_hash.slice(7));
  const key = Uint8Array.from(Buffer.from(doc.attestation.public_key.slice(7), 'base64'));
  const sig = Uint8Array.from(Buffer.from(doc.attestation.signature.slice(7), 'base64'));
  const all = (s: Uint8Array, m: Uint8Array, k: Uint8Array) => providers.map(([, p]) => p.ed25519Verify(s, m, k));
  t.same(
    all(sig, msg, key),
    providers.map(() => true),
    'valid signature',
  );
  // S + L: the same signature in non-canonical form; RFC 8032 strict verification rejects it.
  const L = 2n ** 252n + 27742317777372353535851937790883648493n;
  let s = 0n;
  for (let i = 63; i >= 32; i--) s = (s << 8n) | BigInt(sig[i]!);
  const s2 = s + L;
  const mall = Uint8Array.from(sig);
  let x = s2;
  for (let i = 32; i < 64; i++) {
    mall[i] = Number(x & 0xffn);
    x >>= 8n;
  }
  if (x === 0n)
    t.same(
      all(mall, msg, key),
      providers.map(() => false),
      'non-canonical S rejected by every provider',
    );
  for (let i = 0; i < 50; i++) {
    const k = Uint8Array.from(Buffer.from(randomBytesHex(32), 'hex'));
    t.same(
      all(sig, msg, k),
      providers.map(() => false),
      'random 32-byte key (often not a curve point)',
    );
  }
  t.same(
    all(sig, msg, new Uint8Array(32)),
    providers.map(() => false),
    'all-zero key',
  );
  t.same(
    all(new Uint8Array(64), msg, key),
    providers.map(() => false),
    'all-zero signature',
  );
});

function randomBytesHex(n: number): string {
  return Array.from({ length: n }, () =>
    Math.floor(Math.random() * 256)
      .toString(16)
      .padStart(2, '0'),
  ).join('');
}

t.test('the verifier path is isomorphic: no Node-only imports in shared/proof', async (t) => {
  const dir = fileURLToPath(new URL('../../shared/proof/', import.meta.url));
  const files = readdirSync(dir).filter((f) => f.endsWith('.js'));
  t.ok(files.length >= 10, `${files.length} modules`);
  for (const f of files) {
    const src = readFileSync(dir + f, 'utf8');
    t.notMatch(
      src,
      /from ['"]node:|require\(|from ['"](fs|crypto|buffer|path|os)['"]|\bBuffer\./,
      `${f} imports nothing Node-only`,
    );
  }
  const webhook = readFileSync(fileURLToPath(new URL('../../shared/webhook-signature.js', import.meta.url)), 'utf8');
  t.notMatch(webhook, /from ['"]node:/, 'webhook-signature.js too');
});
