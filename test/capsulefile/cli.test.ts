import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { contentHash, parseCapsulefileYaml } from '../../control-plane/capsulefile/index.js';

const cli = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const systemDir = fileURLToPath(new URL('../../../policies/system-capsulefiles/', import.meta.url));
const sha = (b: Uint8Array | string): string => `sha512:${createHash('sha512').update(b).digest('hex')}`;
const clean = { PATH: process.env['PATH'] ?? '' }; // no CAPSULE_* from the caller's environment

function run(
  args: string[],
  env: Record<string, string> = {},
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [cli, 'capsulefile', ...args], { encoding: 'utf8', env: { ...clean, ...env } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
/** Async form: needed when the test process itself serves the API the CLI calls. */
function runAsync(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [cli, 'capsulefile', ...args], { env: { ...clean, ...env } });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

function sourceDir(
  t: { teardown(fn: () => void): void },
  yaml: string,
  files: Record<string, string | Uint8Array>,
): string {
  const dir = mkdtempSync(join(tmpdir(), 'capsulefile-cli-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'Capsulefile.yaml'), yaml);
  for (const [name, body] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), body);
  }
  return dir;
}

const yaml =
  'name: demo\nruntime: python3\nentrypoint: python3 main.py\nenv_vars: {MODE: "x"}\nfiles:\n  - main.py\n  - util.py\n';
const files = { 'main.py': 'print(1)\n', 'util.py': new Uint8Array([0, 1, 2, 255]) };

t.test('hash prints the library hash of the source directory', async (t) => {
  const dir = sourceDir(t, yaml, files);
  const r = run(['hash', dir]);
  t.equal(r.status, 0, r.stderr);
  const parsed = parseCapsulefileYaml(readFileSync(join(dir, 'Capsulefile.yaml')));
  const expected = contentHash(
    parsed.definition,
    Object.entries(files).map(([filename, body]) => ({
      filename,
      size_bytes: typeof body === 'string' ? Buffer.byteLength(body) : body.length,
      sha512: sha(body),
    })),
  );
  t.equal(r.stdout, `${expected}\n`);
  t.equal(run(['hash', dir]).stdout, r.stdout, 'stable across runs');
  writeFileSync(join(dir, 'main.py'), 'print(2)\n');
  t.not(run(['hash', dir]).stdout, r.stdout, 'a changed file changes the hash');
});

t.test('the system Capsulefiles hash', async (t) => {
  for (const d of ['python3-batch', 'node-batch']) {
    const r = run(['hash', join(systemDir, d)]);
    t.equal(r.status, 0, r.stderr);
    t.match(r.stdout, /^sha512:[0-9a-f]{128}\n$/);
  }
});

t.test('hash failures: one line, exit 1, no stack trace', async (t) => {
  const cases: [string, Record<string, string | Uint8Array>, RegExp][] = [
    [yaml, { 'main.py': 'x' }, /util\.py: listed in Capsulefile\.yaml but not found/],
    [yaml, { 'main.py': '', 'util.py': 'x' }, /main\.py: file is empty/],
    [yaml.replace('util.py', '../outside.py'), { 'main.py': 'x' }, /line 7: files\.1: .*traversal/],
    [yaml + 'tls_ocsp_check: true\n', files, /tls_ocsp_check: is declarable through the API only/],
    ['a: &x 1\nb: *x\n', {}, /anchors/],
  ];
  for (const [y, fs, why] of cases) {
    const r = run(['hash', sourceDir(t, y, fs)]);
    t.equal(r.status, 1);
    t.match(r.stderr, why);
    t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
    t.notMatch(r.stderr, /\n\s+at /);
    t.equal(r.stdout, '');
  }
  const dir = sourceDir(t, yaml, { 'main.py': 'x' });
  symlinkSync('/etc/hostname', join(dir, 'util.py'));
  t.match(run(['hash', dir]).stderr, /util\.py: is a symbolic link/, 'a symlink cannot smuggle a file in');
  t.match(run(['hash', '/nonexistent-capsulefile-dir']).stderr, /no such directory/);
});

t.test('usage errors exit 2', async (t) => {
  t.equal(run([]).status, 2);
  t.equal(run(['frobnicate', '.']).status, 2);
  t.equal(run(['hash']).status, 2);
  t.equal(run(['hash', 'a', 'b']).status, 2);
  t.equal(run(['hash', '.', '--bogus']).status, 2);
  const dir = sourceDir(t, yaml, files);
  let r = run(['push', dir]);
  t.equal(r.status, 2);
  t.match(r.stderr, /CAPSULE_API_URL/);
  r = run(['push', dir], { CAPSULE_API_URL: 'http://127.0.0.1:9' });
  t.equal(r.status, 2);
  t.match(r.stderr, /CAPSULE_API_KEY/);
  t.equal(run(['push', dir, '--api-url', 'ftp://x', '--api-key', 'k']).status, 2);
  t.equal(run(['push', dir, '--api-key']).status, 2);
  t.equal(run(['--help']).status, 0);
});

/**
 * A loopback stand-in for the Capsulefile endpoints (until the control plane's
 * real routes are on this branch): it validates with the same core library and
 * records what the CLI sent.
 */
async function stubApi(t: { teardown(fn: () => void): void }, opts: { failUploadOf?: string } = {}) {
  const seen: { method: string; url: string; auth: string | undefined; idem: string | undefined }[] = [];
  const drafts = new Map<string, { def: unknown; files: { filename: string; size_bytes: number; sha512: string }[] }>();
  const body = async (req: IncomingMessage): Promise<Buffer> => {
    const parts: Buffer[] = [];
    for await (const c of req) parts.push(c as Buffer);
    return Buffer.concat(parts);
  };
  const server = createServer((req, res) => {
    void (async () => {
      seen.push({
        method: req.method ?? '',
        url: req.url ?? '',
        auth: req.headers.authorization,
        idem: req.headers['idempotency-key'] as string | undefined,
      });
      const send = (status: number, json?: unknown): void => {
        res
          .writeHead(status, { 'content-type': 'application/json' })
          .end(json === undefined ? undefined : JSON.stringify(json));
      };
      const u = new URL(req.url ?? '/', 'http://x');
      const m = /^\/v1\/capsulefiles(?:\/(cf_\w+)(?:\/(files|finalize))?)?$/.exec(u.pathname);
      const raw = await body(req);
      if (req.headers.authorization !== 'Bearer svc_test_key')
        return send(401, { error: { code: 'invalid_api_key', message: 'bad key' } });
      if (!m) return send(404, { error: { code: 'resource_not_found', message: 'no route' } });
      const [, id, sub] = m;
      if (req.method === 'POST' && !id) {
        const cid = `cf_${drafts.size + 1}`;
        drafts.set(cid, { def: JSON.parse(raw.toString()) as unknown, files: [] });
        return send(201, { id: cid, status: 'draft', content_hash: null });
      }
      const d = id ? drafts.get(id) : undefined;
      if (!d) return send(404, { error: { code: 'resource_not_found', message: 'no such Capsulefile' } });
      if (req.method === 'POST' && sub === 'files') {
        const filename = u.searchParams.get('filename') ?? '';
        if (filename === opts.failUploadOf)
          return send(400, { error: { code: 'invalid_parameters', message: 'body: file is larger than allowed' } });
        d.files.push({ filename, size_bytes: raw.length, sha512: sha(raw) });
        return send(200, { capsulefile_id: id, filename, size_bytes: raw.length, sha512: sha(raw) });
      }
      if (req.method === 'POST' && sub === 'finalize') {
        return send(200, {
          id,
          status: 'finalized',
          content_hash: contentHash(d.def as never, d.files),
          file_count: d.files.length,
        });
      }
      if (req.method === 'DELETE' && !sub) {
        drafts.delete(id ?? '');
        return send(204);
      }
      return send(404, { error: { code: 'resource_not_found', message: 'no route' } });
    })();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, drafts };
}

t.test('push creates, uploads, finalizes and prints id and content hash', async (t) => {
  const api = await stubApi(t);
  const dir = sourceDir(t, yaml, files);
  const local = run(['hash', dir]).stdout.trim();
  const r = await runAsync(['push', dir], { CAPSULE_API_URL: api.url, CAPSULE_API_KEY: 'svc_test_key' });
  t.equal(r.status, 0, r.stderr);
  t.equal(r.stdout, `cf_1 ${local}\n`);
  t.same(
    api.seen.map((s) => `${s.method} ${s.url}`),
    [
      'POST /v1/capsulefiles',
      'POST /v1/capsulefiles/cf_1/files?filename=main.py',
      'POST /v1/capsulefiles/cf_1/files?filename=util.py',
      'POST /v1/capsulefiles/cf_1/finalize',
    ],
  );
  t.ok(api.seen.every((s) => s.auth === 'Bearer svc_test_key'));
  t.ok(api.seen[0]?.idem && api.seen[3]?.idem, 'create and finalize carry an Idempotency-Key');
});

t.test('push flags override the environment; failures are one line and leave no draft', async (t) => {
  const api = await stubApi(t, { failUploadOf: 'util.py' });
  const dir = sourceDir(t, yaml, files);
  let r = await runAsync(['push', dir, '--api-key=svc_test_key'], {
    CAPSULE_API_URL: api.url,
    CAPSULE_API_KEY: 'wrong',
  });
  t.equal(r.status, 1);
  t.match(
    r.stderr,
    /^capsule capsulefile push: POST \/v1\/capsulefiles\/cf_1\/files: 400 invalid_parameters: body: file is larger than allowed\n$/,
  );
  t.equal(api.drafts.size, 0, 'the draft was deleted');
  t.equal(api.seen.at(-1)?.method, 'DELETE');
  r = await runAsync(['push', dir], { CAPSULE_API_URL: api.url, CAPSULE_API_KEY: 'wrong' });
  t.equal(r.status, 1);
  t.match(r.stderr, /401 invalid_api_key/);
  r = await runAsync(['push', dir, '--api-url', 'http://127.0.0.1:9', '--api-key', 'k']);
  t.equal(r.status, 1);
  t.match(r.stderr, /could not connect/);
});
