// Seccomp corpus: what customers run with node. Prints one line per check
// and NODE-OK at the end; any failure exits non-zero.
'use strict';
/* eslint-disable no-redeclare -- node\'s crypto module shadows the Web Crypto global on purpose */
const fs = require('fs'),
  os = require('os'),
  path = require('path'),
  crypto = require('crypto');
const cp = require('child_process'),
  { Worker } = require('worker_threads'),
  http = require('http'),
  zlib = require('zlib');

async function main() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'corpus-'));
  fs.writeFileSync(path.join(d, 'a.txt'), 'one');
  fs.renameSync(path.join(d, 'a.txt'), path.join(d, 'b.txt'));
  await fs.promises.writeFile(path.join(d, 'c.txt'), 'two');
  await fs.promises.rename(path.join(d, 'c.txt'), path.join(d, 'e.txt'));
  fs.mkdirSync(path.join(d, 'sub/deep'), { recursive: true });
  fs.symlinkSync('b.txt', path.join(d, 'ln'));
  console.log(
    'fs',
    fs.readFileSync(path.join(d, 'ln'), 'utf8'),
    await fs.promises.readFile(path.join(d, 'e.txt'), 'utf8'),
    fs.readdirSync(d).sort().join(','),
    fs.statSync(path.join(d, 'b.txt')).size,
  );
  fs.chmodSync(path.join(d, 'b.txt'), 0o700);
  fs.linkSync(path.join(d, 'b.txt'), path.join(d, 'hard'));
  fs.copyFileSync(path.join(d, 'hard'), path.join(d, 'copy'));
  fs.truncateSync(path.join(d, 'copy'), 1);
  console.log(
    'chmod-link-copy',
    (fs.statSync(path.join(d, 'hard')).mode & 0o777).toString(8),
    fs.readlinkSync(path.join(d, 'ln')),
    fs.readFileSync(path.join(d, 'copy'), 'utf8'),
  );
  fs.rmSync(d, { recursive: true });
  console.log('fs-rm', fs.existsSync(d));
  const fd = fs.openSync(path.join(os.tmpdir(), `fsync-${process.pid}`), 'w');
  fs.writeSync(fd, 'saved');
  fs.fsyncSync(fd);
  console.log('fsync', fs.fstatSync(fd).size);
  fs.closeSync(fd);
  fs.unlinkSync(path.join(os.tmpdir(), `fsync-${process.pid}`));
  console.log('process', process.pid > 1, process.cpuUsage().user > 0, os.availableParallelism() >= 1);

  console.log(
    'crypto',
    crypto.createHash('sha256').update('abc').digest('hex').slice(0, 16),
    crypto.randomBytes(16).length,
  );
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
  console.log(
    'sign',
    crypto.verify(null, Buffer.from('m'), publicKey, crypto.sign(null, Buffer.from('m'), privateKey)),
  );
  const key = await new Promise((res, rej) => crypto.scrypt('pw', 'salt', 16, (e, k) => (e ? rej(e) : res(k))));
  console.log('scrypt', key.length);

  console.log('child_process', cp.execFileSync('sh', ['-c', 'echo $((6*7))'], { encoding: 'utf8' }).trim());
  const spawned = await new Promise((res, rej) => {
    const c = cp.spawn('sort', [], { stdio: ['pipe', 'pipe', 'inherit'] });
    let o = '';
    c.stdout.on('data', (b) => (o += b));
    c.on('error', rej);
    c.on('close', (code) => res(`${code} ${o.trim().replace(/\n/g, ',')}`));
    c.stdin.end('b\na\n');
  });
  console.log('spawn', spawned);

  const fromWorker = await new Promise((res, rej) => {
    const w = new Worker('const { parentPort } = require("worker_threads"); parentPort.postMessage(21 * 2);', {
      eval: true,
    });
    w.once('message', res);
    w.once('error', rej);
  });
  console.log('worker', fromWorker);

  const srv = http.createServer((req, res) => res.end(`hi ${req.method} ${req.url}`));
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const body = await new Promise((res, rej) => {
    http
      .get({ host: '127.0.0.1', port: srv.address().port, path: '/x' }, (r) => {
        let b = '';
        r.on('data', (c) => (b += c));
        r.on('end', () => res(`${r.statusCode} ${b}`));
      })
      .on('error', rej);
  });
  srv.close();
  console.log('http', body);

  const gz = zlib.gzipSync('zip '.repeat(100));
  const back = await new Promise((res, rej) => zlib.gunzip(gz, (e, b) => (e ? rej(e) : res(b))));
  console.log('zlib', back.length, gz.length < 100);
  console.log('NODE-OK');
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
