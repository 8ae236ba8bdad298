// Stream segments (RFC 6962 subtrees of chunk digests) and the bounded event
// queue between a capsule's proxy and its recorder.
import t from 'tap';
import { createHash } from 'node:crypto';
import { merkleRoot } from '../../shared/proof/index.js';
import { combineSegmentRoots, segmentCount, SegmentedStream, type Segment } from '../../egress-proxy/segments.js';
import { EventQueue } from '../../egress-proxy/event-queue.js';
import type { EgressEvent } from '../../egress-proxy/index.js';

const digest = (i: number) => createHash('sha512').update(`chunk ${i}`).digest();
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

t.test('segment roots are subtrees of the chunk tree and fold into merkleRoot over all chunks', async (t) => {
  for (const n of [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 28, 29, 31, 32, 33, 63, 64, 100, 257, 1000, 4097]) {
    const leaves = Array.from({ length: n }, (_, i) => digest(i));
    const s = new SegmentedStream();
    const segs: Segment[] = [];
    leaves.forEach((d, i) => {
      const g = s.push(d, i + 1);
      if (g) segs.push(g);
    });
    const last = s.end();
    if (last) segs.push(last);
    const want = hex(merkleRoot(leaves));
    t.equal(hex(s.root()), want, `n=${n}: root from segments`);
    t.equal(hex(combineSegmentRoots(segs)), want, `n=${n}: verifier's fold`);
    t.equal(segs.length, segmentCount(n), `n=${n}: schedule`);
    t.equal(s.chunks, n);
    for (const g of segs) {
      const slice = leaves.slice(g.firstChunk, g.firstChunk + g.chunks);
      if (hex(g.root) !== hex(merkleRoot(slice))) t.fail(`n=${n}: segment ${g.index} root`);
    }
    t.equal(
      segs.reduce((a, g) => a + g.bytes, 0),
      (n * (n + 1)) / 2,
      `n=${n}: bytes add up`,
    );
  }
});

t.test('segments per exchange: at most 4*floor(log2(chunks))+4, whatever the chunk count', async (t) => {
  let worst = 0;
  for (let n = 1; n <= 1 << 17; n++) {
    const c = segmentCount(n);
    if (c > 4 * Math.floor(Math.log2(n)) + 4) t.fail(`n=${n}: ${c} segments`);
    worst = Math.max(worst, c);
  }
  t.ok(worst <= 72, `every n up to 2^17 checked (worst ${worst})`);
  for (let k = 18; k <= 30; k++)
    for (const n of [2 ** k - 1, 2 ** k, 2 ** k + 1, 3 * 2 ** (k - 2), 2 ** k - 2 ** (k - 3)])
      t.ok(segmentCount(n) <= 4 * k + 4, `n=${n}`);
  // A 1 GiB response (the default bound) of one-byte SSE events is 2^30 chunks.
  t.ok(segmentCount(2 ** 30) <= 124);
  t.equal(segmentCount(400_000), 68, '400,000 tiny SSE events: 68 events, not 400,000');
});

t.test('combineSegmentRoots refuses segments that are not aligned subtrees', async (t) => {
  const r = digest(0);
  t.throws(() => combineSegmentRoots([{ firstChunk: 1, chunks: 1, root: r }]), /starts at chunk 1/);
  t.throws(
    () =>
      combineSegmentRoots([
        { firstChunk: 0, chunks: 1, root: r },
        { firstChunk: 1, chunks: 2, root: r },
        { firstChunk: 3, chunks: 1, root: r },
      ]),
    /aligned/,
  );
  t.throws(
    () =>
      combineSegmentRoots([
        { firstChunk: 0, chunks: 2, root: r },
        { firstChunk: 2, chunks: 3, root: r },
      ]),
    /subtree boundary/,
  );
  t.equal(hex(combineSegmentRoots([])), hex(merkleRoot([])), 'no segments: the empty tree');
});

const ev = (i: number): EgressEvent => ({
  type: 'SealedHttpRequest',
  at: 'x',
  exchange: i,
  method: 'GET',
  scheme: 'https',
  host: 'h',
  port: 443,
  request_canonical_hash: 'sha512:00',
  request_body_hash: 'sha512:00',
  request_body_bytes: 0,
  status: 200,
  response_body_hash: null,
  response_body_bytes: 0,
  streamed: false,
  tls: null,
  duration_ms: 0,
  outcome: 'completed',
});

t.test(
  'event queue: at most max unsettled; past it drops and reports one ActivityTruncated once drained',
  async (t) => {
    const stored: EgressEvent[] = [];
    const waiting: (() => void)[] = [];
    const q = new EventQueue(
      100,
      (e) =>
        new Promise<void>((res) =>
          waiting.push(() => {
            stored.push(e);
            res();
          }),
        ),
      () => '2026-01-01T00:00:00.000000Z',
    );
    for (let i = 0; i < 10_000; i++) q.emit(ev(i));
    t.equal(q.pending, 100, 'bounded');
    t.equal(waiting.length, 100, 'only 100 reached the recorder');
    t.equal(q.dropping, 9_900);
    // Drain half: the truncation is reported then, and delivery resumes.
    for (const w of waiting.splice(0, 50)) w();
    await new Promise((r) => setImmediate(r));
    const trunc = stored.filter((e) => e.type === 'ActivityTruncated');
    t.equal(trunc.length, 0, 'reported as the next event (queued behind the ones in flight)');
    t.equal(waiting.length, 51, 'ActivityTruncated handed to the recorder');
    for (const w of waiting.splice(0)) w();
    await new Promise((r) => setImmediate(r));
    const [tr] = stored.filter((e) => e.type === 'ActivityTruncated');
    t.same(tr, {
      type: 'ActivityTruncated',
      at: '2026-01-01T00:00:00.000000Z',
      dropped_events: 9_900,
      first_dropped_type: 'SealedHttpRequest',
      reason: 'egress_event_queue_full',
    });
    q.emit(ev(1));
    t.equal(waiting.length, 1, 'delivering again');
    t.equal(q.dropping, 0);
  },
);

t.test('event queue: a synchronous recorder is never bounded; throws and rejections are counted', async (t) => {
  let n = 0;
  const q = new EventQueue(
    2,
    () => {
      n++;
      if (n === 3) throw new Error('x');
      if (n === 4) return Promise.reject(new Error('y'));
      return undefined;
    },
    () => 'now',
  );
  for (let i = 0; i < 10; i++) q.emit(ev(i));
  await new Promise((r) => setImmediate(r));
  t.equal(n, 10);
  t.equal(q.callbackErrors, 2);
  t.equal(q.dropping, 0);
});

t.test('event queue: flushTruncation reports drops not yet reported (stop)', async (t) => {
  const got: EgressEvent[] = [];
  const q = new EventQueue(
    1,
    (e) => {
      got.push(e);
      return new Promise(() => undefined);
    },
    () => 'now',
  );
  q.emit(ev(1));
  q.emit(ev(2));
  q.emit(ev(3));
  q.flushTruncation();
  t.same(
    got.map((e) => e.type),
    ['SealedHttpRequest', 'ActivityTruncated'],
  );
  t.match(got[1], { dropped_events: 2 });
  q.flushTruncation();
  t.equal(got.length, 2, 'nothing more to report');
});
