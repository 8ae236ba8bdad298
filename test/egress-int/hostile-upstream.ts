// The hostile tests' upstream, in its own process so the control plane's
// event loop (measured for the other tenant) carries only the proxy's work.
// Reads KEY_FILE and CERT_FILE, prints its port on stdout.
//   /flood?n=N       text/event-stream of N events "data: D\n\n", written in batches of 1,000
//   /bytes?n=N       application/octet-stream, the same bytes with no SSE framing (the benign baseline)
//   anything else    reads the body, answers {"ok":true,"bytes":<count>}
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';

export function floodBatch(from: number, n: number): Buffer {
  let s = '';
  for (let i = from; i < from + n; i++) s += `data: ${i % 10}\n\n`;
  return Buffer.from(s);
}

if (process.argv[2] === 'serve') {
  const srv = createServer(
    { key: readFileSync(process.env.KEY_FILE ?? ''), cert: readFileSync(process.env.CERT_FILE ?? '') },
    (req, res) => {
      const url = new URL(req.url ?? '/', 'https://x');
      if (url.pathname === '/flood' || url.pathname === '/bytes') {
        const total = Number(url.searchParams.get('n') ?? 0);
        res.writeHead(200, {
          'content-type': url.pathname === '/flood' ? 'text/event-stream' : 'application/octet-stream',
        });
        let i = 0;
        const pump = () => {
          while (i < total) {
            const b = floodBatch(i, Math.min(1000, total - i));
            i += 1000;
            if (!res.write(b)) {
              res.once('drain', pump);
              return;
            }
          }
          res.end();
        };
        pump();
        return;
      }
      let n = 0;
      req.on('data', (c: Buffer) => (n += c.length));
      req.on('end', () => {
        const out = JSON.stringify({ ok: true, bytes: n });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
      });
    },
  );
  srv.listen(0, '127.0.0.1', () => process.stdout.write(`${(srv.address() as AddressInfo).port}\n`));
}
