// Long exec output is answered in slices with the event loop free between
// them (control-plane/http/sliced-json.ts); the text must be exactly what
// JSON.stringify gives, whatever the slice boundaries cut.
import t from 'tap';
import { answerJson, slicedJson, wantsSlicing } from '../../control-plane/http/sliced-json.js';

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
