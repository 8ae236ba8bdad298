// The runner's local RFC 6962 / SHA-512 Merkle code against the project's
// golden vectors (activity_root cases; leaf data = JCS of each event).
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { leafHash, rootFromLeafHashes } from '../../sandbox-runner/merkle.js';

/** JCS (RFC 8785) equals ES JSON.stringify with keys sorted by UTF-16 code units. */
function jcs(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(jcs).join(',')}]`;
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).sort().map((k) => `${JSON.stringify(k)}:${jcs(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// The vectors live beside the contract; the repository may carry a copy.
const VECTORS = [new URL('../../../test/data/cdp-vectors/merkle.json', import.meta.url).pathname, '/work/shared/cdp/vectors/merkle.json'].find((p) => existsSync(p));

t.test('matches the golden merkle vectors', { skip: VECTORS ? false : 'no merkle vectors on this machine' }, async (t) => {
  const doc = JSON.parse(readFileSync(VECTORS!, 'utf8')) as { cases: { events: unknown[]; activity_root: string }[] };
  t.ok(doc.cases.length > 2);
  for (const c of doc.cases) {
    const root = rootFromLeafHashes(c.events.map((e) => leafHash(Buffer.from(jcs(e), 'utf8'))));
    t.equal(`sha512:${root.toString('hex')}`, c.activity_root, `${c.events.length} events`);
  }
});
