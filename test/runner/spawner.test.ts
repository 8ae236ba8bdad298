// Process starts through the spawner helper (sandbox-runner/spawner.ts): the
// child is the helper's, not this (large) process's; its pipes, exit status,
// kill, start failures and the helper's own death behave as a ChildProcess's.
import t from 'tap';
import { readFileSync, rmSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Spawner } from '../../sandbox-runner/spawner.js';

const env = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
const stat = (pid: number): string[] => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
const ppidOf = (pid: number): number => Number(stat(pid)[1]);
/** Gone, or a zombie waiting for whoever reaps orphans here. */
const dead = (pid: number): boolean => {
  try {
    return stat(pid)[0] === 'Z';
  } catch {
    return true;
  }
};

function collect(s: NodeJS.ReadableStream | null): () => string {
  let text = '';
  s?.on('data', (b: Buffer) => (text += b.toString('utf8')));
  return () => text;
}

t.test('pipes both ways, bytes written before the runner listens, exit code; started by the helper', async (t) => {
  const sp = new Spawner();
  t.teardown(() => sp.close());
  const c = sp.spawn('sh', ['-c', 'echo early >&2; read x; echo "got $x"; exit 7'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env,
  });
  const pid = await c.ready;
  t.equal(c.pid, pid);
  t.not(ppidOf(pid), process.pid, 'forked by the helper, not by this process');
  // Read only now: what the child wrote at once must still arrive.
  await new Promise((r) => setTimeout(r, 100));
  const out = collect(c.stdout);
  const err = collect(c.stderr);
  c.stdin!.end('hello\n');
  t.same(await c.closed, [7, null], 'exit status after every pipe closed');
  t.equal(out(), 'got hello\n');
  t.equal(err(), 'early\n', 'nothing the child wrote before its pipes were passed is lost');
});

t.test('a file opened by the helper as a stdio entry, uid, kill', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capsule-spawner-'));
  const sp = new Spawner();
  t.teardown(() => {
    void sp.close();
    rmSync(dir, { recursive: true, force: true });
  });
  writeFileSync(join(dir, 'in'), 'from a file\n');
  const c = sp.spawn('sh', ['-c', 'cat <&3; id -u; id -G'], {
    stdio: ['ignore', 'pipe', 'ignore', { open: join(dir, 'in') }],
    env,
    uid: 65534,
  });
  await c.ready;
  const out = collect(c.stdout);
  t.same(await c.closed, [0, null]);
  t.equal(out(), 'from a file\n65534\n65534\n', 'the file on fd 3; uid and gid set, supplementary groups dropped');

  const s = sp.spawn('sleep', ['60'], { stdio: ['ignore', 'ignore', 'ignore'], env });
  await s.ready;
  s.kill('SIGKILL');
  t.same(await s.closed, [null, 'SIGKILL']);
});

t.test('a start that fails rejects ready and still closes', async (t) => {
  const sp = new Spawner();
  t.teardown(() => sp.close());
  const c = sp.spawn('/nonexistent/program', [], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let error: Error | null = null;
  c.on('error', (e: Error) => (error = e));
  await t.rejects(c.ready);
  t.same(await c.closed, [null, null]);
  t.match(error, { message: /ENOENT/ });
});

t.test("the helper's death ends its children and fails them; the next start brings a new helper", async (t) => {
  const sp = new Spawner();
  t.teardown(() => sp.close());
  const c = sp.spawn('sleep', ['60'], { stdio: ['ignore', 'pipe', 'ignore'], env });
  const pid = await c.ready;
  const helper = ppidOf(pid);
  process.kill(helper, 'SIGKILL');
  t.same(await c.closed, [null, null], 'reported ended');
  await new Promise((r) => setTimeout(r, 50));
  t.ok(dead(pid), 'the orphan was killed');
  const d = sp.spawn('sleep', ['60'], { stdio: ['ignore', 'ignore', 'ignore'], env });
  const pid2 = await d.ready;
  t.not(ppidOf(pid2), helper, 'a new helper');
  d.kill('SIGKILL');
  t.same(await d.closed, [null, 'SIGKILL']);
});

t.test('close waits until the helper is gone', async (t) => {
  const sp = new Spawner();
  const c = sp.spawn('sleep', ['60'], { stdio: ['ignore', 'ignore', 'ignore'], env });
  const helper = ppidOf(await c.ready);
  await sp.close();
  process.kill(await c.ready, 'SIGKILL');
  t.ok(dead(helper), 'no helper left (the runner removes its cgroup leaf next)');
});

t.test('starts asked for and not answered yet are counted, each answer reported', async (t) => {
  const sp = new Spawner();
  t.teardown(() => sp.close());
  let answers = 0;
  sp.onStartAnswered = () => answers++;
  t.equal(sp.starting, 0);
  const kids = [1, 2, 3].map(() => sp.spawn('true', [], { stdio: ['ignore', 'ignore', 'ignore'], env }));
  const bad = sp.spawn('/nonexistent/program', [], { stdio: ['ignore', 'ignore', 'ignore'], env });
  t.equal(sp.starting, 4, 'four asked, none answered yet (the helper answers asynchronously)');
  await Promise.all(kids.map((k) => k.ready));
  await t.rejects(bad.ready);
  t.equal(sp.starting, 0, 'a start counts until it is answered, started or failed');
  t.equal(answers, 4);
  await Promise.all(kids.map((k) => k.closed));
  t.equal(answers, 4, 'an exit is not a start answered');
});
