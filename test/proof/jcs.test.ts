// RFC 8785 edge cases beyond the vectors.
import t from 'tap';
import { canonicalize, tryCanonicalize, JcsError } from '../../shared/proof/index.js';
import { MAX_DEPTH } from '../../shared/proof/jcs.js';

t.test('numbers in ECMAScript form', async (t) => {
  const cases: [number, string][] = [
    [-0, '0'],
    [0, '0'],
    [1e21, '1e+21'],
    [1e20, '100000000000000000000'],
    [5e-324, '5e-324'],
    [1e-7, '1e-7'],
    [0.000001, '0.000001'],
    [-1.5, '-1.5'],
    [0.1 + 0.2, '0.30000000000000004'],
    [Number.MAX_SAFE_INTEGER, '9007199254740991'],
    [2 ** 53 + 2, '9007199254740994'],
    [1.7976931348623157e308, '1.7976931348623157e+308'],
    [-5e-324, '-5e-324'],
    [123e-20, '1.23e-18'],
  ];
  for (const [n, s] of cases) t.equal(canonicalize(n), s, `${s}`);
  t.equal(canonicalize({ a: -0 }), '{"a":0}');
});

t.test('non-finite numbers and non-JSON values are rejected', async (t) => {
  for (const bad of [
    NaN,
    Infinity,
    -Infinity,
    1n,
    () => 1,
    Symbol('x'),
    undefined,
    [undefined],
    new Date(0),
    new Map(),
    { a: { b: NaN } },
  ]) {
    t.throws(() => canonicalize(bad), JcsError, String(typeof bad));
    t.equal(tryCanonicalize(bad), undefined);
  }
});

t.test('members sorted by UTF-16 code units, not code points', async (t) => {
  // U+FFFF is one unit 0xFFFF; U+10000 is the pair D800 DC00, so it sorts first.
  t.equal(canonicalize({ '\uFFFF': 1, '\u{10000}': 2 }), '{"\u{10000}":2,"\uFFFF":1}');
  t.equal(
    canonicalize({ b: 1, a: 2, B: 3, '': 4, aa: 5, 'a\u0000': 6 }),
    '{"":4,"B":3,"a":2,"a\\u0000":6,"aa":5,"b":1}',
  );
  t.equal(
    canonicalize({ '\u{1F600}': 1, '\uFB33': 2, '\u20AC': 3 }),
    '{"\u20AC":3,"\u{1F600}":1,"\uFB33":2}',
    'non-BMP key between U+20AC and U+FB33',
  );
  t.equal(canonicalize({ 10: 'x', 9: 'y', a: 'z' }), '{"10":"x","9":"y","a":"z"}', 'integer-like keys sort as strings');
});

t.test('minimal string escaping', async (t) => {
  t.equal(canonicalize('\u0000\u0008\u0009\u000a\u000c\u000d\u001f'), '"\\u0000\\b\\t\\n\\f\\r\\u001f"');
  t.equal(
    canonicalize('\u007f\u2028\u2029/é'),
    '"\u007f\u2028\u2029/é"',
    'DEL, separators, solidus and non-ASCII as is',
  );
  t.equal(canonicalize('"\\'), '"\\"\\\\"');
});

t.test('lone surrogates are written deterministically as lower-case escapes', async (t) => {
  t.equal(canonicalize('\uD800'), '"\\ud800"');
  t.equal(canonicalize('a\uDFFFb'), '"a\\udfffb"');
  t.equal(canonicalize({ '\uDC00': 1 }), '{"\\udc00":1}');
  t.equal(canonicalize('\uD83D\uDE00'), '"😀"', 'a valid pair is not escaped');
  t.equal(canonicalize('\uD800'), canonicalize('\uD800'), 'same input, same output');
});

t.test('structure', async (t) => {
  t.equal(canonicalize({ a: undefined, b: [], c: {} }), '{"b":[],"c":{}}', 'undefined members are absent');
  t.equal(
    canonicalize(Object.assign(Object.create(null), { z: 1, y: null })),
    '{"y":null,"z":1}',
    'null-prototype objects',
  );
  t.equal(canonicalize([true, false, null, 'x', 1]), '[true,false,null,"x",1]');
  const cyclic: Record<string, unknown> = {};
  cyclic['self'] = cyclic;
  t.throws(() => canonicalize(cyclic), JcsError, 'a cycle is refused');
  let deep: unknown = 1;
  for (let i = 0; i < MAX_DEPTH + 5; i++) deep = [deep];
  t.throws(() => canonicalize(deep), JcsError, 'too deep is refused');
  let ok: unknown = 1;
  for (let i = 0; i < MAX_DEPTH - 1; i++) ok = { a: ok };
  t.type(canonicalize(ok), 'string', 'just under the depth limit works');
});

t.test('canonical form re-parses to the same value and is idempotent', async (t) => {
  const v = { z: [1, 2.5, { y: 'é', x: null }], a: { c: true, b: -0 }, '😀': 'x' };
  const c = canonicalize(v);
  t.equal(canonicalize(JSON.parse(c)), c);
});
