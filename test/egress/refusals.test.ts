// The proxy's refusal table and its raw-socket writer (CONNECT refusals, upgrades, parse errors).
import t from 'tap';
import { STATUS_CODES } from 'node:http';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { REFUSALS, refuseRaw, type RefusalKind } from '../../egress-proxy/refusals.js';

t.test('every refusal has a real HTTP error status and a lower-case code', async (t) => {
  for (const [kind, row] of Object.entries(REFUSALS)) {
    t.ok(row.status >= 400 && row.status <= 599 && STATUS_CODES[row.status], `${kind}: ${row.status}`);
    t.match(row.code, /^[a-z_]+$/, kind);
  }
  t.equal(REFUSALS.inspection_budget_exhausted.status, 429);
  t.equal(REFUSALS.body_too_large_for_inspection.status, 413);
  t.equal(REFUSALS.resolve_timeout.code, 'resolve_failed', 'a resolver timeout is a 504 with the resolve_failed code');
});

t.test('refuseRaw writes one complete response and closes', async (t) => {
  const got = await new Promise<string>((resolve) => {
    const srv = createServer((s: Socket) => refuseRaw(s, 'not_in_profile' as RefusalKind, 'no'));
    srv.listen(0, '127.0.0.1', () => {
      const c = connect((srv.address() as AddressInfo).port, '127.0.0.1');
      let b = '';
      c.on('data', (d) => (b += d));
      c.on('close', () => {
        srv.close();
        resolve(b);
      });
    });
  });
  t.match(got, /^HTTP\/1\.1 403 Forbidden\r\n/);
  t.match(got, /\r\nx-capsule-egress-error: not_in_profile\r\n/);
  t.match(got, /\r\ncontent-length: 19\r\nconnection: close\r\n\r\ncapsule egress: no\n$/);
});
