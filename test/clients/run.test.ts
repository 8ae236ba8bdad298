// `capsule run` end to end against a real `capsule serve`: uploads, exec,
// every output downloaded and digest-checked, the proof written and verified;
// --json; a Capsulefile directory; Ctrl-C destroys the capsule and keeps the
// proof; the key is never taken from argv.
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync, readdirSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyProof } from '../../shared/proof/index.js';
import { CLI, serve, signupKey } from '../helpers/serve.js';

t.test('capsule run', async (t) => {
  const s = await serve();
  t.teardown(s.stop);
  const key = await signupKey(s.url);
  const dir = mkdtempSync(join(tmpdir(), 'capsule-run-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const env = { PATH: process.env.PATH!, CAPSULE_BASE_URL: s.url, CAPSULE_API_KEY: key, HOME: dir };
  writeFileSync(join(dir, 'a.csv'), 'x\n1\n2\n');
  writeFileSync(join(dir, 'b.txt'), 'bee');
  writeFileSync(join(dir, 'in.txt'), 'from --input');
  const run = (args: string[], e: Record<string, string> = env) =>
    spawnSync(process.execPath, [CLI, 'run', ...args], { cwd: dir, env: e, encoding: 'utf8', timeout: 120_000 });

  await t.test('uploads, command, outputs, proof, summary', async (t) => {
    const r = run([
      '--upload',
      'a.csv',
      'b.txt',
      '--input',
      'in.txt',
      '--out',
      'out1',
      '--',
      'wc -l < /data/input/a.csv > /data/output/lines.txt; cat /data/input/b.txt /data/input/data > /data/output/both.txt; echo ran',
    ]);
    t.equal(r.status, 0, r.stdout + r.stderr);
    t.equal(readFileSync(join(dir, 'out1/lines.txt'), 'utf8'), '3\n');
    t.equal(readFileSync(join(dir, 'out1/both.txt'), 'utf8'), 'beefrom --input');
    const proof = JSON.parse(readFileSync(join(dir, 'out1/audit-proof.json'), 'utf8'));
    t.equal(verifyProof(proof).valid, true, 'the saved proof verifies');
    t.match(r.stdout, /verdict +AuditProof verified\n/);
    t.match(r.stdout, /command +exit 0/);
    t.match(r.stdout, /stdout +ran/);
    t.match(r.stdout, /out1\/lines\.txt \(2 B, SHA-512 checked\)/);
    t.equal(r.stderr, '', 'no progress output when stdout is not a terminal');
    t.ok(r.stdout.split('\n').length < 25, 'one screen');
    const st: any = await (
      await fetch(`${s.url}/v1/capsules/${proof.capsule_id}`, { headers: { authorization: `Bearer ${key}` } })
    ).json();
    t.equal(st.status, 'destroyed');
  });

  await t.test('--json, a failing command, default out dir', async (t) => {
    const r = run(['--json', '--', 'echo oops >&2; exit 3']);
    t.equal(r.status, 1, 'the command failed');
    const j = JSON.parse(r.stdout);
    t.equal(j.exit_code, 3);
    t.equal(j.stderr, 'oops\n');
    t.equal(j.verified, true);
    t.match(j.proof_path, new RegExp(`capsule-out-${j.capsule_id}/audit-proof\\.json$`));
    t.ok(existsSync(j.proof_path));
  });

  await t.test('a Capsulefile directory is pushed and its entrypoint runs', async (t) => {
    const cf = join(dir, 'cf');
    mkdirSync(cf);
    writeFileSync(
      join(cf, 'Capsulefile.yaml'),
      'name: run-cf\nruntime: python3.11\nentrypoint: python3 main.py\nfiles:\n  - main.py\n',
    );
    writeFileSync(join(cf, 'main.py'), "open('/data/output/r.txt','w').write('entry')\n");
    const r = run(['--capsulefile', 'cf', '--out', 'out3', '--json']);
    t.equal(r.status, 0, r.stdout + r.stderr);
    t.equal(readFileSync(join(dir, 'out3/r.txt'), 'utf8'), 'entry');
  });

  await t.test('the key is never read from argv; config file works', async (t) => {
    const r = run(['--api-key', key, '--', 'true']);
    t.equal(r.status, 2);
    t.match(r.stderr, /never from the command line/);
    const cfg = join(dir, 'config.json');
    writeFileSync(cfg, JSON.stringify({ base_url: s.url, api_key: key }), { mode: 0o600 });
    const r2 = run(['--json', '--', 'true'], { PATH: env.PATH, HOME: dir, CAPSULE_CONFIG: cfg });
    t.equal(r2.status, 0, r2.stderr);
    const r3 = run(['--', 'true'], { PATH: env.PATH, HOME: dir });
    t.equal(r3.status, 2);
    t.match(r3.stderr, /no service address/);
  });

  await t.test('Ctrl-C destroys the capsule and keeps the proof', async (t) => {
    const child = spawn(process.execPath, [CLI, 'run', '--json', '--out', 'out5', '--', 'sleep 60'], { cwd: dir, env });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    // Wait until the command is running in its capsule.
    let id: string | undefined;
    for (let i = 0; i < 200 && !id; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const list: any = await (
        await fetch(`${s.url}/v1/capsules?limit=100`, { headers: { authorization: `Bearer ${key}` } })
      ).json();
      id = list.items.find((c: { status: string }) => c.status === 'executing')?.id;
    }
    t.ok(id, 'the command is running');
    const started = Date.now();
    child.kill('SIGINT');
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    t.equal(code, 130);
    t.ok(Date.now() - started < 30_000, 'did not wait for the 60 s command');
    const j = JSON.parse(out);
    t.equal(j.interrupted, true);
    t.equal(j.capsule_id, id);
    const proof = JSON.parse(readFileSync(join(dir, 'out5/audit-proof.json'), 'utf8'));
    t.equal(verifyProof(proof).valid, true);
    t.equal(proof.termination.command_was_running, true, 'the proof says a command was running');
    const st: any = await (
      await fetch(`${s.url}/v1/capsules/${id}`, { headers: { authorization: `Bearer ${key}` } })
    ).json();
    t.equal(st.status, 'destroyed');
    t.same(readdirSync(join(dir, 'out5')), ['audit-proof.json']);
  });
});
