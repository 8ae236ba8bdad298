// Each tenant's capsules map their own loader, libc and shell
// (sandbox-runner/private-copies.ts), so a fork bomb's file-mapping lock is
// its tenant's alone. From inside real capsules: what their shell maps is not
// the host's file, two capsules of one tenant share one copy, another
// tenant's is another; the copies hold the image's bytes, are read-only, and
// go with the tenant's last capsule. Then the copies alone, on a fake image
// (and a new copy once the image's file is replaced).
import t from 'tap';
import { createHash } from 'node:crypto';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  statfsSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PrivateCopies } from '../../sandbox-runner/private-copies.js';
import { ownState, startRunner } from '../helpers/runner.js';

const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';
const LOADER = '/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2';
const SHELL = '/usr/bin/dash';

/** A /proc/<pid>/maps device and inode, as the kernel prints them. */
function hostId(path: string): string {
  const st = statSync(path);
  const dev = Number(st.dev);
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  return `${major.toString(16).padStart(2, '0')}:${minor.toString(16).padStart(2, '0')} ${st.ino}`;
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

t.test('a tenant maps its own loader, libc and shell', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  const own = join(r.stateDir, 'etc', '.own');
  for (const [id, tenant] of [
    ['pc-a1', 'alpha'],
    ['pc-a2', 'alpha'],
    ['pc-b1', 'beta'],
  ] as const)
    await c.create({ capsule_id: id, memory_mb: 128, tenant });
  t.equal(readdirSync(own).length, 2, 'one set of copies per tenant');

  /** What the capsule's shell maps: path -> "dev inode" (the shell reads its own maps with a builtin). */
  const maps = async (id: string): Promise<Map<string, string>> => {
    const res = await c.exec({
      capsule_id: id,
      command: 'while read -r a p o dev ino path; do echo "$path $dev $ino"; done < /proc/self/maps',
      timeout_ms: 20000,
    });
    t.equal(res.exit_code, 0, res.stderr);
    const m = new Map<string, string>();
    for (const line of res.stdout.split('\n')) {
      const [path, dev, ino] = line.split(' ');
      if (path && dev && ino) m.set(path, `${dev} ${ino}`);
    }
    return m;
  };
  const a1 = await maps('pc-a1');
  const a2 = await maps('pc-a2');
  const b1 = await maps('pc-b1');
  for (const f of [LIBC, LOADER, SHELL]) {
    t.ok(a1.get(f), `the shell maps ${f}`);
    t.not(a1.get(f), hostId(f), `${f}: not the host's file`);
    t.equal(a2.get(f), a1.get(f), `${f}: one copy for the tenant's two capsules`);
    t.not(b1.get(f), a1.get(f), `${f}: another tenant's is another copy`);
  }

  const res = await c.exec({
    capsule_id: 'pc-b1',
    command: `sha256sum ${LIBC} ${SHELL}; echo x >> ${SHELL} || echo refused`,
    timeout_ms: 20000,
  });
  t.match(res.stdout, new RegExp(`^${sha256(LIBC)}  ${LIBC}\n${sha256(SHELL)}  ${SHELL}\n`), "the image's bytes");
  t.match(res.stdout, /refused/);
  t.match(res.stderr, /Read-only file system|Permission denied/);

  await c.destroy('pc-a1');
  t.equal(readdirSync(own).length, 2, "the tenant's copies stay while it has a capsule");
  await c.destroy('pc-a2');
  await c.destroy('pc-b1');
  for (let i = 0; i < 100 && readdirSync(own).length > 0; i++) await new Promise((res) => setTimeout(res, 20));
  t.same(readdirSync(own), [], "the copies go with each tenant's last capsule");
});

t.test('the copies on an image, a changed image, and none', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'private-copies-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const image = join(dir, 'image');
  const own = join(dir, 'own');
  mkdirSync(join(image, 'usr', 'bin'), { recursive: true });
  mkdirSync(join(image, 'usr', 'lib', 'x86_64-linux-gnu'), { recursive: true });
  writeFileSync(join(image, SHELL), 'shell bytes', { mode: 0o755 });
  symlinkSync('/etc/passwd', join(image, LIBC)); // not a regular file of the image: never followed
  let n = 0;
  const copies = await PrivateCopies.open(own, { bytes: (k) => Buffer.alloc(k, ++n) });
  const first = copies.acquire('t1', image);
  const binds = await first.binds;
  t.equal(binds.length, 1, 'only what the image has as a regular file');
  const [copy, target] = binds[0]!;
  t.equal(target, SHELL);
  t.equal(readFileSync(copy, 'utf8'), 'shell bytes');
  t.equal(statSync(copy).mode & 0o777, 0o755);
  const second = copies.acquire('t1', image);
  t.same(await second.binds, binds, "the tenant's second capsule: the same copies");
  const none = copies.acquire('t2', join(dir, 'no-such-image'));
  t.same(await none.binds, [], 'no files, no binds');

  // The image's shell replaced (a security update): the next capsule gets the new bytes.
  writeFileSync(join(image, 'usr', 'bin', 'dash.new'), 'patched shell', { mode: 0o755 });
  renameSync(join(image, 'usr', 'bin', 'dash.new'), join(image, SHELL));
  const third = copies.acquire('t1', image);
  const [newCopy] = (await third.binds)[0]!;
  t.not(newCopy, copy);
  t.equal(readFileSync(newCopy, 'utf8'), 'patched shell');
  t.equal(readFileSync(copy, 'utf8'), 'shell bytes', 'the old copy stays for the capsules holding it');

  first.release();
  first.release(); // twice counts once
  t.ok(statSync(copy).isFile(), 'kept while a capsule holds it');
  second.release();
  third.release();
  none.release();
  const gone = async (): Promise<string[]> => {
    for (let i = 0; i < 50 && readdirSync(own).length > 0; i++) await new Promise((r) => setTimeout(r, 10));
    return readdirSync(own);
  };
  t.same(await gone(), [], 'removed with the last release');
  t.equal(copies.size, 0);

  const again = await PrivateCopies.open(own, { bytes: (k) => Buffer.alloc(k, 9) });
  await again.acquire('t3', image).binds;
  t.equal(readdirSync(own).length, 1);
  const reopened = await PrivateCopies.open(own, { bytes: (k) => Buffer.alloc(k, 7) });
  t.same(readdirSync(own), [], 'a new runner removes what the last one left');
  t.equal(reopened.size, 0);
});

t.test("a runner started over a dead runner's /etc tmpfs gives it its own size", async (t) => {
  const { stateDir, uidBlock } = ownState(t, 'capsule-etc-size-');
  const sizeMb = (): number => {
    const s = statfsSync(join(stateDir, 'etc'));
    return (s.blocks * s.bsize) / (1024 * 1024);
  };
  const first = await startRunner({ stateDir, uidBlock, options: { runner_memory_mb: '256' } });
  t.equal(sizeMb(), 64, 'a quarter of runner_memory_mb');
  await first.kill(); // its tmpfs stays mounted
  const second = await startRunner({ stateDir, uidBlock, options: { runner_memory_mb: '1024' } });
  t.teardown(() => second.stop());
  t.equal(sizeMb(), 256, "the dead runner's tmpfs, now a quarter of this runner's runner_memory_mb");
  await second.client.create({ capsule_id: 'after', memory_mb: 64 });
  const r = await second.client.exec({ capsule_id: 'after', command: 'echo ok', timeout_ms: 10000 });
  t.equal(r.stdout, 'ok\n', 'capsules start on it');
});
