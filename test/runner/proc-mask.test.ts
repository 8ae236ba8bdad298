// Host identity hidden from inside a real capsule: the masked /proc entries
// read as empty (files) or empty directories, /proc/sys is read-only, /sys is
// absent, and the capsule's mountinfo names no host path (state dir, capsule
// id, runner directory).
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { MASKED_PROC_DIRS, MASKED_PROC_FILES } from '../../sandbox-runner/sandbox.js';
import { startRunner } from '../helpers/runner.js';

t.test('proc masks and mountinfo from inside a capsule', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  const id = 'maskprobe-7f3a9c';
  const made = await c.create({ capsule_id: id, memory_mb: 128 });
  const run = async (command: string): Promise<{ out: string; code: number }> => {
    const res = await c.exec({ capsule_id: id, command, timeout_ms: 20000 });
    return { out: res.stdout + res.stderr, code: res.exit_code };
  };

  t.ok(
    readFileSync('/proc/cmdline', 'utf8').length > 0,
    'the host /proc/cmdline is not empty (the mask is what hides it)',
  );

  await t.test('masked files read as empty', async (t) => {
    const present = MASKED_PROC_FILES.filter((f) => existsSync(f));
    t.ok(present.includes('/proc/cmdline') && present.includes('/proc/sys/kernel/random/boot_id'));
    for (const f of present) {
      const { out, code } = await run(`wc -c < ${f}`);
      t.equal(code, 0, `${f} opens`);
      t.equal(out.trim(), '0', `${f} reads as empty`);
    }
    // What python's uuid or a fingerprinting script would try:
    const { out } = await run(
      `python3 -c "import os; print([len(open(p,'rb').read()) for p in ['/proc/cmdline','/proc/iomem','/proc/sys/kernel/random/boot_id']])"`,
    );
    t.equal(out.trim(), '[0, 0, 0]');
  });

  await t.test('masked directories are empty and read-only', async (t) => {
    for (const d of MASKED_PROC_DIRS.filter((x) => existsSync(x))) {
      const { out } = await run(`ls -A ${d} | wc -l; touch ${d}/x 2>&1 || true`);
      t.match(out, /^0\n/, `${d} lists nothing`);
      t.match(out, /Read-only file system|Permission denied/, `${d} refuses writes`);
    }
  });

  await t.test('/proc/sys is read-only and shows the capsule namespaces', async (t) => {
    const { out } = await run(
      'cat /proc/sys/kernel/hostname; echo evil > /proc/sys/kernel/hostname 2>&1; echo 1 > /proc/sys/net/ipv4/ip_forward 2>&1; mount | grep " /proc/sys " ; true',
    );
    t.match(out, new RegExp(`^${made.hostname}\n`), 'its own hostname (UTS namespace of the reader)');
    t.match(out, /hostname: Read-only file system/);
    t.match(out, /ip_forward: Read-only file system/);
  });

  await t.test('no /sys (so no /sys/firmware), no kcore', async (t) => {
    const { out } = await run('ls /sys/firmware 2>&1; head -c1 /proc/kcore 2>&1 | wc -c; true');
    t.match(out, /No such file or directory/);
    t.notMatch(out, /acpi|dmi|efi/);
  });

  await t.test('mountinfo names no host path', async (t) => {
    const { out } = await run('cat /proc/self/mountinfo /proc/self/mounts');
    t.ok(out.includes('/data/input'), 'the listing is real');
    t.notOk(out.includes(r.stateDir), 'no state dir path');
    t.notOk(out.includes(id), 'no capsule id');
    t.notOk(/capsule-runner|\/run\/|\/tmp\/capsule/.test(out), `no runner directory: ${out}`);
    for (const line of out.split('\n').filter((l) => / - /.test(l))) {
      const root = line.split(' ')[3] ?? '';
      // The tenant's private copies (private-copies.ts) are one level deeper: /.own/<random>/libc.so.6.
      const depth = root.startsWith('/.own/') ? 4 : 3;
      t.ok(root.split('/').length <= depth, `root field ${root} is a short in-filesystem path`);
    }
  });

  await t.test('destroy still reports only the data mounts as writable', async (t) => {
    const d = await c.destroy(id);
    const step2 = d.evidence[1] as { sandbox_writable_mounts?: { mount_point: string }[] } | null;
    const writable = (step2?.sandbox_writable_mounts ?? []).map((w) => w.mount_point);
    t.notOk(
      writable.some((w) => w.startsWith('/proc/')),
      `no masked /proc entry writable: ${JSON.stringify(writable)}`,
    );
  });
});
