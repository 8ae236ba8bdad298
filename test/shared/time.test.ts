import t from 'tap';
import { isoMicros, nowIsoMicros } from '../../shared/time.js';

const FORM = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

t.test('six fraction digits: whole milliseconds pad with zeros, fractions give microseconds', async (t) => {
  t.equal(isoMicros(Date.UTC(2026, 10, 21, 22, 5, 0, 123)), '2026-11-21T22:05:00.123000Z');
  t.equal(isoMicros(Date.UTC(2026, 10, 21, 22, 5, 0, 123) + 0.456), '2026-11-21T22:05:00.123456Z');
  t.equal(isoMicros(Date.UTC(2026, 0, 1)), '2026-01-01T00:00:00.000000Z');
  t.equal(isoMicros(Date.UTC(2026, 0, 1) + 0.9995), '2026-01-01T00:00:00.000999Z', 'truncated, not rounded up');
});

t.test('now is in the contract form and close to Date.now()', async (t) => {
  const s = nowIsoMicros();
  t.match(s, FORM);
  t.ok(Math.abs(Date.parse(s) - Date.now()) < 1000);
});
