// The verifier never throws: random values, mutated and truncated proofs, and
// hostile JavaScript objects all get a well-formed result.
import t from 'tap';
import { verifyProof, type VerifyResult } from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';
import { verifyLine } from '../../cli/verify-input.js';
import { resultShapeProblem, vectorDoc, proofVectors } from './helpers.js';
import { seededRandom } from './fixtures.js';

const bytes = seededRandom(12345);
const rand = (n: number) => {
  const b = bytes(4);
  return ((b[0]! | (b[1]! << 8) | (b[2]! << 16)) >>> 0) % n;
};

const KEYS = [
  'cdp_version',
  'capsule_id',
  'session_id',
  'created_at',
  'destroyed_at',
  'completeness',
  'reason',
  'chain',
  'final_hash',
  'attestation',
  'canonical_hash',
  'activity',
  'activity_root',
  'signing_authority_id',
  'signing_key_version',
  'step',
  'subsystem',
  'chain_hash',
  'evidence_hash',
  'operation',
  'algorithm',
  'public_key',
  'signature',
  'key_id',
  'destruction',
  'x',
  '',
];
const STRINGS = [
  '2.1',
  '2.0',
  '1.0',
  '',
  'partial',
  'Ed25519',
  'sha512:' + '0'.repeat(128),
  'sha256:' + '1'.repeat(64),
  'base64:AAAA',
  'base64:' + 'A'.repeat(43) + '=',
  '\uD800',
  '😀',
];

function randomValue(depth: number): unknown {
  switch (rand(depth > 4 ? 5 : 8)) {
    case 0:
      return null;
    case 1:
      return rand(2) === 0;
    case 2:
      return [0, -0, 1, 8, -1, 1e308, 5e-324, 3.5, 2 ** 53][rand(9)];
    case 3:
      return STRINGS[rand(STRINGS.length)];
    case 4:
      return String.fromCharCode(...Array.from({ length: rand(20) }, () => rand(0x10000)));
    case 5:
      return Array.from({ length: rand(10) }, () => randomValue(depth + 1));
    default: {
      const o: Record<string, unknown> = {};
      for (let i = rand(8); i > 0; i--) o[KEYS[rand(KEYS.length)]!] = randomValue(depth + 1);
      return o;
    }
  }
}

function check(t: any, input: unknown, what: string): VerifyResult | undefined {
  let r: VerifyResult;
  try {
    r = verifyProof(input, { crypto: nodeCrypto });
  } catch (err) {
    t.fail(`${what}: threw ${String(err)}`);
    return undefined;
  }
  const problem = resultShapeProblem(r);
  if (problem) t.fail(`${what}: bad result shape (${problem})`);
  return r;
}

t.test('random JSON values', async (t) => {
  let n = 0;
  for (let i = 0; i < 3000; i++) {
    check(t, randomValue(0), `random #${i}`);
    n++;
  }
  t.pass(`${n} random values, no throw, well-formed results`);
});

t.test('valid proofs with one random subtree replaced or removed', async (t) => {
  const bases = proofVectors()
    .filter((v) => v.expect['valid'] === true)
    .map((v) => v.document);
  let valid = 0;
  for (let i = 0; i < 3000; i++) {
    const doc = structuredClone(bases[rand(bases.length)]) as any;
    // walk to a random node
    let parent: any = doc;
    let key: string | number = Object.keys(doc)[rand(Object.keys(doc).length)]!;
    for (let d = rand(4); d > 0; d--) {
      const child: any = parent[key];
      if (child === null || typeof child !== 'object') break;
      const ks = Object.keys(child);
      if (ks.length === 0) break;
      parent = child;
      key = Array.isArray(child) ? rand(child.length) : ks[rand(ks.length)]!;
    }
    if (rand(3) === 0) {
      if (Array.isArray(parent)) parent.splice(Number(key), 1);
      else delete parent[key];
    } else parent[key] = randomValue(2);
    const r = check(t, doc, `mutation #${i}`);
    if (r?.valid) valid++;
  }
  t.pass(`3000 mutations, ${valid} still valid (e.g. unsigned members changed), none threw`);
});

t.test('truncated proof text through the CLI line path never throws', async (t) => {
  const text = JSON.stringify(vectorDoc('valid-2.1-record.json'));
  let errors = 0;
  for (let cut = 0; cut < text.length; cut += 3) {
    const out = verifyLine(text.slice(0, cut), `cut ${cut}`, { crypto: nodeCrypto });
    if ('error' in out) {
      errors++;
      t.notMatch(out.error, /\n/, 'one line');
    } else for (const v of out.verdicts) if (resultShapeProblem(v.result)) t.fail(`cut ${cut}`);
  }
  t.ok(errors > 0, `${errors} truncations reported as not JSON`);
  t.same(Object.hasOwn(verifyLine(text, 'whole', { crypto: nodeCrypto }), 'verdicts'), true);
});

t.test('hostile JavaScript inputs', async (t) => {
  const base = () => vectorDoc('valid-2.1-record.json');
  const cases: [string, () => unknown][] = [
    ['undefined', () => undefined],
    ['null', () => null],
    ['number', () => 42],
    ['string', () => '{"cdp_version":"2.1"}'],
    ['BigInt', () => 10n],
    ['symbol', () => Symbol('p')],
    ['function', () => () => 1],
    [
      'cyclic capsule_context',
      () => {
        const d = base();
        d.capsule_context.self = d.capsule_context;
        return d;
      },
    ],
    [
      'cyclic chain',
      () => {
        const d = base();
        d.chain.push(d.chain);
        return d;
      },
    ],
    [
      'cyclic activity',
      () => {
        const d = base();
        d.activity[0].loop = d.activity;
        return d;
      },
    ],
    [
      'deep nesting',
      () => {
        const d = base();
        let x: any = {};
        const root = x;
        for (let i = 0; i < 100000; i++) {
          x.a = {};
          x = x.a;
        }
        d.capsule_context = root;
        return d;
      },
    ],
    [
      'deep array document',
      () => {
        let x: any = [];
        for (let i = 0; i < 100000; i++) x = [x];
        return x;
      },
    ],
    [
      'BigInt member',
      () => {
        const d = base();
        d.termination.count = 5n;
        return d;
      },
    ],
    [
      'NaN member',
      () => {
        const d = base();
        d.capsule_context.n = NaN;
        return d;
      },
    ],
    [
      'Infinity step',
      () => {
        const d = base();
        d.chain[0].step = Infinity;
        return d;
      },
    ],
    [
      'function member',
      () => {
        const d = base();
        d.capsule_context.f = () => 1;
        return d;
      },
    ],
    [
      'throwing getter (top)',
      () => {
        const d = base();
        Object.defineProperty(d, 'final_hash', {
          enumerable: true,
          get() {
            throw new Error('boom');
          },
        });
        return d;
      },
    ],
    [
      'throwing getter (view)',
      () => {
        const d = base();
        Object.defineProperty(d.capsule_context, 'x', {
          enumerable: true,
          get() {
            throw new Error('boom');
          },
        });
        return d;
      },
    ],
    [
      'throwing proxy',
      () =>
        new Proxy(
          {},
          {
            get() {
              throw new Error('trap');
            },
            ownKeys() {
              throw new Error('trap');
            },
          },
        ),
    ],
    [
      'revoked proxy',
      () => {
        const p = Proxy.revocable({}, {});
        p.revoke();
        return p.proxy;
      },
    ],
    [
      'proxy chain',
      () => {
        const d = base();
        d.chain = new Proxy(d.chain, {
          get(tg, k) {
            if (k === '3') throw new Error('x');
            return Reflect.get(tg, k);
          },
        });
        return d;
      },
    ],
    [
      'class instance',
      () =>
        new (class X {
          cdp_version = '2.1';
        })(),
    ],
    ['Date', () => new Date()],
    ['Map', () => new Map([['cdp_version', '2.1']])],
    ['null prototype', () => Object.assign(Object.create(null), base())],
    [
      'sparse chain',
      () => {
        const d = base();
        d.chain = new Array(8);
        return d;
      },
    ],
    [
      'huge chain',
      () => {
        const d = base();
        d.chain = Array.from({ length: 200000 }, (_, i) => ({ ...d.chain[i % 8] }));
        return d;
      },
    ],
    [
      'huge string',
      () => {
        const d = base();
        d.capsule_id = 'x'.repeat(20_000_000);
        return d;
      },
    ],
    [
      'huge activity',
      () => {
        const d = base();
        d.activity = Array.from({ length: 50000 }, (_, i) => ({ seq: i + 1, type: 'X', at: 't' }));
        return d;
      },
    ],
    ['frozen', () => Object.freeze(base())],
    [
      'attestation array',
      () => {
        const d = base();
        d.attestation = [];
        return d;
      },
    ],
    [
      'typed array signature',
      () => {
        const d = base();
        d.attestation.signature = new Uint8Array(64);
        return d;
      },
    ],
    ['__proto__ member', () => JSON.parse(JSON.stringify(base()).replace('{', '{"__proto__":{"x":1},'))],
  ];
  for (const [name, make] of cases) {
    let input: unknown;
    try {
      input = make();
    } catch (err) {
      t.fail(`${name}: could not build (${String(err)})`);
      continue;
    }
    const r = check(t, input, name);
    if (r)
      t.equal(
        r.valid,
        name === 'null prototype' || name === 'frozen' ? true : r.valid,
        `${name}: ${r.valid ? 'valid' : `${r.failure_reason.type}/${r.failure_reason.reason}`}`,
      );
  }
  t.match(
    verifyProof(cases[7]![1]()),
    { valid: false, stage_reached: 0, failure_reason: { type: 'FormatInvalid', reason: 'WrongType' } },
    'cycle is a format problem',
  );
  t.match(
    verifyProof(vectorDoc('valid-2.1-record.json'), {
      now: () => {
        throw new Error('clock');
      },
    }),
    { valid: true },
    'a throwing clock still gets a result',
  );
  const badProvider = {
    sha512: () => {
      throw new Error('x');
    },
    ed25519Verify: () => {
      throw new Error('y');
    },
  };
  t.equal(
    verifyProof(vectorDoc('valid-2.1-record.json'), { crypto: badProvider }).valid,
    false,
    'a throwing provider is a failure, not a throw',
  );
  const weirdManifest = {
    authorities: [null, 5, { signing_authority_id: 'auth_acme_selfhosted', keys: 'nope' }],
  } as any;
  t.match(verifyProof(vectorDoc('valid-2.1-managed-resolves.json'), { manifest: weirdManifest }), {
    valid: false,
    stage_reached: 6,
    failure_reason: { reason: 'UnknownKeyVersion' },
  });
});
