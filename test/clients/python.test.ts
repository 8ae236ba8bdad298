// The Python SDK: its pytest suite (README example, every endpoint family,
// retries, time-outs, batch, session chain, every proof vector) run with
// Debian's Python against a real `capsule serve`, and its independent verifier
// agreeing with the TypeScript one on every vector and on seeded mutations.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { canonicalize, verifyProof } from '../../shared/proof/index.js';
import { serve, signupKey } from '../helpers/serve.js';

const PY = '/usr/bin/python3';
const PKG = fileURLToPath(new URL('../../../clients/python', import.meta.url));
const VECTOR_DIRS = [
  fileURLToPath(new URL('../../../test/data/cdp-vectors', import.meta.url)),
  ...(existsSync('/work/shared/cdp/vectors') ? ['/work/shared/cdp/vectors'] : []),
];

t.test('pytest suite against capsule serve', async (t) => {
  const s = await serve();
  t.teardown(s.stop);
  const key = await signupKey(s.url);
  const r = spawnSync(PY, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider'], {
    cwd: PKG,
    env: {
      PATH: process.env.PATH,
      CAPSULE_BASE_URL: s.url,
      CAPSULE_API_KEY: key,
      CAPSULE_VECTOR_DIRS: VECTOR_DIRS.join(':'),
    },
    encoding: 'utf8',
    timeout: 600_000,
  });
  t.equal(r.status, 0, `pytest exit 0:\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-2000)}`);
  const passed = Number(/(\d+) passed/.exec(r.stdout)?.[1] ?? 0);
  t.ok(passed >= 80, `${passed} pytest tests passed`);
  t.notMatch(r.stdout, /skipped|failed|error/i, 'nothing skipped: the live tests ran');
});

/** Deterministic mutations of a document: members removed, retyped, altered. */
function mutations(doc: Record<string, any>, seed: number): unknown[] {
  let x = seed;
  const rnd = (n: number) => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return x % n;
  };
  const out: unknown[] = [];
  const keys = Object.keys(doc);
  for (const k of keys) {
    const { [k]: _, ...rest } = doc;
    out.push(rest);
    out.push({ ...doc, [k]: null });
    out.push({ ...doc, [k]: typeof doc[k] === 'string' ? doc[k] + 'x' : 'x' });
  }
  for (let i = 0; i < 20; i++) {
    const d = structuredClone(doc);
    if (Array.isArray(d.chain) && d.chain.length) {
      const s = d.chain[rnd(d.chain.length)];
      const f = ['step', 'subsystem', 'chain_hash', 'evidence_hash', 'operation'][rnd(5)]!;
      s[f] = [1.0, 9, 'x', null, 'sha512:' + '0'.repeat(128), true][rnd(6)];
    }
    if (rnd(3) === 0 && d.attestation)
      d.attestation.signature = 'base64:' + 'A'.repeat(rnd(2) ? 86 : 88) + (rnd(2) ? '==' : '');
    if (rnd(4) === 0 && Array.isArray(d.activity))
      d.activity.push({ seq: 99, type: 'X', at: 'now', n: [1e21, 1e-7, 0.1] });
    if (rnd(5) === 0) d.signing_key_version = [-1, 1.5, '3', 3][rnd(4)];
    out.push(d);
  }
  return out;
}

t.test('the Python verifier agrees with the TypeScript one', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'py-agree-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const docs: unknown[] = [];
  for (const vd of VECTOR_DIRS) {
    for (const f of readdirSync(join(vd, 'proofs')).sort()) {
      const v = JSON.parse(readFileSync(join(vd, 'proofs', f), 'utf8'));
      docs.push(v.document);
      if (v.document && typeof v.document === 'object' && !Array.isArray(v.document))
        docs.push(...mutations(v.document, f.length));
    }
  }
  // The destruction vectors (signed statements of incomplete destruction) and their mutations too.
  const dv = fileURLToPath(new URL('../../../test/data/destruction-vectors/', import.meta.url));
  for (const f of readdirSync(dv)
    .filter((x) => x.endsWith('.json'))
    .sort()) {
    const v = JSON.parse(readFileSync(join(dv, f), 'utf8'));
    docs.push(v.document, ...mutations(v.document, f.length + 7));
    for (const st of [3, '3', 0, 9, null]) {
      const d = structuredClone(v.document);
      if (d.termination) d.termination.incomplete_steps = [{ step: st, reason: 'r' }];
      docs.push(d);
    }
  }
  const files = docs.map((d, i) => {
    const p = join(dir, `${i}.json`);
    writeFileSync(p, JSON.stringify(d));
    return p;
  });
  const r = spawnSync(PY, ['-m', 'capsule_sdk', 'verify', '--json', ...files], {
    cwd: PKG,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  t.equal(r.stderr, '', 'no Python errors');
  const lines = r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  t.equal(lines.length, docs.length);
  let disagreements = 0;
  docs.forEach((d, i) => {
    const { verified_at: _a, ...ts } = verifyProof(d) as Record<string, unknown>;
    const { verified_at: _b, ...py } = lines[i] as Record<string, unknown>;
    if (canonicalize(ts) !== canonicalize(py)) {
      disagreements++;
      t.fail(`document ${i}: TypeScript ${JSON.stringify(ts)} / Python ${JSON.stringify(py)}`);
    }
  });
  t.equal(disagreements, 0, `${docs.length} documents, same verdict, stage and reason`);
  const valid = lines.filter((l) => l.valid).length;
  t.ok(valid >= 14 && valid < docs.length / 2, `${valid} valid, ${docs.length - valid} invalid`);
});
