// Property: any single-character change of any signed string field (and any
// +1 on a signed number) makes verification fail.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import {
  emitRecord,
  emitPartialRecord,
  generateEphemeralKey,
  verifyProof,
  nobleCrypto,
  type CryptoProvider,
} from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';
import { vectorDoc } from './helpers.js';
import { recordInput, partialInput } from './fixtures.js';

type Path = (string | number)[];

/** Paths of every string and number leaf under the signed part of a 2.x document. */
function signedLeaves(doc: any): { path: Path; value: string | number }[] {
  const out: { path: Path; value: string | number }[] = [];
  const walk = (v: unknown, path: Path) => {
    if (typeof v === 'string' || typeof v === 'number') out.push({ path, value: v });
    else if (Array.isArray(v)) v.forEach((x, i) => walk(x, [...path, i]));
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, [...path, k]);
  };
  // Everything in the document is signed except record-only members that are
  // not bound (evidence is bound through evidence_hash only by re-hashing, internal never).
  for (const [k, v] of Object.entries(doc)) if (k !== 'evidence' && k !== 'internal') walk(v, [k]);
  return out;
}

function setAt(doc: any, path: Path, value: unknown): void {
  let o = doc;
  for (let i = 0; i < path.length - 1; i++) o = o[path[i]!];
  o[path[path.length - 1]!] = value;
}

function flip(c: string): string {
  return c === 'a' ? 'b' : c === '=' ? 'A' : 'a';
}

function checkAllMutations(t: Test, name: string, original: any, crypto: CryptoProvider, stride = 1): void {
  t.equal(verifyProof(original, { crypto }).valid, true, `${name}: original verifies`);
  let tried = 0;
  const stillValid: string[] = [];
  for (const { path, value } of signedLeaves(original)) {
    if (typeof value === 'number') {
      const doc = structuredClone(original);
      setAt(doc, path, value + 1);
      tried++;
      if (verifyProof(doc, { crypto }).valid) stillValid.push(`${path.join('.')} +1`);
      continue;
    }
    for (let i = 0; i < value.length; i += stride) {
      const doc = structuredClone(original);
      setAt(doc, path, value.slice(0, i) + flip(value[i]!) + value.slice(i + 1));
      tried++;
      if (verifyProof(doc, { crypto }).valid) stillValid.push(`${path.join('.')}[${i}]`);
    }
  }
  t.same(stillValid, [], `${name}: all ${tried} single changes fail`);
  t.ok(tried > 100, `${name}: ${tried} mutations tried`);
}

t.test('2.1 record vector, node provider, every character', async (t) => {
  checkAllMutations(t, 'valid-2.1-record', vectorDoc('valid-2.1-record.json'), nodeCrypto);
});

t.test('2.1 record vector, noble provider, every 7th character', async (t) => {
  checkAllMutations(t, 'valid-2.1-record', vectorDoc('valid-2.1-record.json'), nobleCrypto, 7);
});

t.test('partial, managed and 2.0 vectors', async (t) => {
  for (const name of ['valid-partial-signed.json', 'valid-2.1-managed-resolves.json', 'valid-2.0.json']) {
    checkAllMutations(t, name, vectorDoc(name), nodeCrypto);
  }
});

t.test('freshly emitted records', async (t) => {
  const rnd = (n: number) => new Uint8Array(randomBytes(n));
  const rec = JSON.parse(
    JSON.stringify(emitRecord(recordInput(), { mode: 'ephemeral', key: generateEphemeralKey(rnd) })),
  );
  checkAllMutations(t, 'emitted record', rec, nodeCrypto);
  const partial = JSON.parse(
    JSON.stringify(emitPartialRecord(partialInput(), { mode: 'ephemeral', key: generateEphemeralKey(rnd) })),
  );
  checkAllMutations(t, 'emitted partial', partial, nodeCrypto);
});

t.test('1.0: every chain-bound string is signed through the final hash', async (t) => {
  const doc = vectorDoc('valid-1.0.json');
  const bound = (p: Path) =>
    p[0] === 'cdp_version' ||
    p[0] === 'destroyed_at' ||
    p[0] === 'final_hash' ||
    (p[0] === 'attestation' && p[1] !== 'key_id') ||
    (p[0] === 'chain' && (p[2] === 'chain_hash' || p[2] === 'subsystem' || p[2] === 'step'));
  const survivors: string[] = [];
  for (const { path, value } of signedLeaves(doc).filter((l) => bound(l.path))) {
    const s = String(value);
    for (let i = 0; i < s.length; i++) {
      const d = structuredClone(doc);
      setAt(d, path, typeof value === 'number' ? value + 1 : s.slice(0, i) + flip(s[i]!) + s.slice(i + 1));
      if (verifyProof(d, { crypto: nodeCrypto }).valid) survivors.push(`${path.join('.')}[${i}]`);
    }
  }
  t.same(survivors, []);
});
