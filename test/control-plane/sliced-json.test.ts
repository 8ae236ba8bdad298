// Long exec output is answered in slices with the event loop free between
// them (control-plane/http/sliced-json.ts); the text must be exactly what
// JSON.stringify gives, whatever the slice boundaries cut.
import t from 'tap';
import { answerJson, jsonStringBytes, slicedJson, wantsSlicing } from '../../control-plane/http/sliced-json.js';

const text = async (v: Record<string, unknown>, slice?: number): Promise<string> => {
  let out = '';
  for await (const c of slicedJson(v, slice)) out += String(c);
  return out;
};

t.test('the same text as JSON.stringify, at every cut', async (t) => {
  const emoji = '\u{1F600}'; // a surrogate pair
  const cases: Record<string, unknown>[] = [
    {},
    { a: 1 },
    { capsule_id: 'cap_1', stdout: '\x01'.repeat(1000), stderr: 'a\ufffdb', exit_code: 0, ok: true, n: null },
    { s: 'x'.repeat(99) + emoji + 'y'.repeat(50), after: [1, { b: 'c' }] },
    { quote: '"\\\n\t'.repeat(40), skipped: undefined, last: 'z' },
    { lone: '\ud800'.repeat(10) + 'ok' + '\udc00'.repeat(3) },
    { pairs: '\u{1F600}'.repeat(40) },
  ];
  for (const v of cases)
    for (const slice of [1, 2, 7, 64, 100, 101]) t.equal(await text(v, slice), JSON.stringify(v), `slice ${slice}`);
  // A pair straddling a cut stays whole: no `\ud83d` escape appears.
  const straddle = await text({ s: 'a'.repeat(63) + emoji }, 64);
  t.notMatch(straddle, /\\ud83d/);
  t.same(JSON.parse(straddle), { s: 'a'.repeat(63) + emoji });
});

t.test('jsonStringBytes is the UTF-8 of JSON.stringify without its quotes, for every code unit and pair', async (t) => {
  const same = (x: string): boolean => jsonStringBytes(x).equals(Buffer.from(JSON.stringify(x).slice(1, -1), 'utf8'));
  let every = '';
  for (let c = 0; c < 0x10000; c++) every += String.fromCharCode(c);
  t.ok(same(every), 'each of the 65,536 UTF-16 code units once (lone surrogates included)');
  t.ok(same('plain ascii text'), 'the native path');
  t.ok(same('a\n'.repeat(200) + '\x01\x02' + '\ud800'), 'a control character after the first 256');
  // Random mixes of the characters that take each branch.
  const pool = [
    '\x00',
    '\x01',
    '\b',
    '\t',
    '\n',
    '\f',
    '\r',
    '\x1f',
    '"',
    '\\',
    'a',
    '\x7f',
    '\u00e9',
    '\u07ff',
    '\u0800',
    '\ufffd',
    '\ud800',
    '\udbff',
    '\udc00',
    '\udfff',
    '\u{1F600}',
    '\u2028',
  ];
  let seed = 7;
  const next = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
  let bad = 0;
  for (let n = 0; n < 2000; n++) {
    let x = '';
    for (let k = next() % 40; k > 0; k--) x += pool[next() % pool.length];
    if (!same(x)) bad++;
  }
  t.equal(bad, 0, 'random mixes');
});

t.test('other work runs between slices', async (t) => {
  const v = { stdout: '\x01'.repeat(1 << 20) };
  let turns = 0;
  const tick = setInterval(() => turns++, 0);
  const out = await text(v);
  clearInterval(tick);
  t.equal(out.length, JSON.stringify(v).length);
  t.ok(turns >= 4, `timers ran ${turns} times while 1 MiB of control characters was written`);
});

t.test('only long answers are sliced', async (t) => {
  t.notOk(wantsSlicing(10, 10));
  t.ok(wantsSlicing(1 << 20, 0));
  const small: { type: string; body: unknown } = { type: '', body: undefined };
  answerJson(small, { stdout: 'hi' }, 2);
  t.same(small.body, { stdout: 'hi' });
  const big: { type: string; body: unknown } = { type: '', body: undefined };
  answerJson(big, { stdout: 'x'.repeat(1 << 20) }, 1 << 20);
  t.equal(big.type, 'application/json');
  t.ok(typeof (big.body as { pipe?: unknown }).pipe === 'function', 'a stream');
});
