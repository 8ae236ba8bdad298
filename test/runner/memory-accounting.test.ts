// Memory accounting and admission, attacked from inside real capsules:
// - uploads are charged to the capsule's memory cgroup, not the runner's:
//   4 x 60 MB uploaded into a 256 MB capsule and then 230 MB allocated inside
//   cannot both fit (ENOSPC or OOM), and the runner keeps serving;
// - filling a capsule's storage gives ENOSPC, not an OOM kill, and the
//   capsule stays usable; usage reports storage used and its bound;
// - the runner sits in its own bounded cgroup;
// - admission refuses (code `capacity`) a capsule the node cannot back.
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { RunnerError } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';
import { WRITER_LEAF } from '../../sandbox-runner/cgroup.js';

const MB = 1024 * 1024;

/** The runner's v1 memory cgroup directory (hybrid/v1 hosts), from /proc/<pid>/cgroup. */
function memoryCgroupOf(pid: number): string | null {
  const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  return line ? line.slice(line.lastIndexOf(':') + 1) : null;
}

function memoryMountPoint(): string | null {
  for (const l of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = l.split(' - ');
    if (pre && post && post.startsWith('cgroup ') && post.split(' ')[2]?.split(',').includes('memory'))
      return pre.split(' ')[4] ?? null;
  }
  return null;
}

t.test('memory accounting and admission', async (t) => {
  const r = await startRunner({ options: { node_memory_mb: '700', runner_memory_mb: '1024' } });
  t.teardown(() => r.stop());
  const c = r.client;

  await t.test('the runner runs in its own bounded cgroup', async (t) => {
    const cg = memoryCgroupOf(r.process.pid!);
    const mnt = memoryMountPoint();
    t.ok(cg?.endsWith('/.runner'), `runner memory cgroup ${cg}`);
    if (cg && mnt) {
      const limit = Number(readFileSync(join(mnt, cg, 'memory.limit_in_bytes'), 'utf8'));
      t.equal(limit, 1024 * MB, 'bounded by runner_memory_mb');
    }
    const hello = await c.hello();
    t.equal(hello.capacity?.memory_mb, 700);
    t.equal(hello.capacity?.runner_memory_mb, 1024);
    t.equal(hello.capacity?.committed_mb, 0);
  });

  await t.test('4 x 60 MB uploads and a 230 MB allocation do not both fit in 256 MB', async (t) => {
    const made = await c.create({ capsule_id: 'acct', memory_mb: 256 });
    t.equal(made.storage_limit_bytes, 192 * MB, 'storage is three quarters of memory_mb');
    const chunk = Buffer.alloc(60 * MB, 0x5a);
    const results: string[] = [];
    for (let i = 0; i < 4; i++) {
      try {
        await c.upload('acct', `part${i}`, Buffer.from(chunk));
        results.push('ok');
      } catch (e) {
        results.push(e instanceof RunnerError ? e.code : String(e));
      }
    }
    const u = await c.usage('acct');
    t.ok(
      u.memory_used_bytes !== null && u.memory_used_bytes >= 170 * MB,
      `uploads charged to the capsule: ${u.memory_used_bytes}`,
    );
    t.ok(u.storage_used_bytes >= 170 * MB, `storage used ${u.storage_used_bytes}`);
    const alloc = await c.exec({
      capsule_id: 'acct',
      command: "python3 -c \"b = bytearray(230 << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')\"",
      timeout_ms: 60000,
    });
    const allFit = results.every((x) => x === 'ok') && alloc.stdout.includes('allocated');
    t.notOk(allFit, `uploads ${results.join(',')}; alloc exit ${alloc.exit_code} oom ${alloc.oom_killed}`);
    t.same(results.slice(0, 3), ['ok', 'ok', 'ok'], 'what fits is accepted');
    t.equal(results[3], 'no_space', 'the upload past the storage bound gets no_space');
    t.equal(alloc.oom_killed, true, 'the allocation over what is left is OOM-killed');
    t.equal(alloc.exit_code, 137);
    // The runner is unaffected: it answers, and another capsule works.
    await c.create({ capsule_id: 'other', memory_mb: 64 });
    const ok = await c.exec({ capsule_id: 'other', command: 'echo alive', timeout_ms: 10000 });
    t.equal(ok.stdout, 'alive\n');
    t.equal(r.process.exitCode, null, 'the runner is still running');
    await c.destroy('other');
    await c.destroy('acct');
  });

  await t.test('filling storage gives ENOSPC, not an OOM kill; the capsule stays usable', async (t) => {
    const made = await c.create({ capsule_id: 'fill', memory_mb: 128 });
    t.equal(made.storage_limit_bytes, 96 * MB);
    for (const cmd of [
      'dd if=/dev/zero of=/tmp/fill bs=1M 2>&1; echo "dd=$?"',
      "python3 -c \"\nimport os\nf = open('/data/output/big', 'wb')\ntry:\n    while True: f.write(b'y' * (1 << 20)); f.flush()\nexcept OSError as e: print('errno', e.errno)\"",
    ]) {
      const res = await c.exec({ capsule_id: 'fill', command: cmd, timeout_ms: 60000 });
      t.equal(res.oom_killed, false, `no OOM kill: ${res.stdout}${res.stderr}`);
      t.match(res.stdout + res.stderr, /No space left on device|errno 28/, 'ENOSPC');
      const u = await c.usage('fill');
      t.equal(u.storage_limit_bytes, 96 * MB);
      t.ok(u.storage_used_bytes > 90 * MB, `storage used ${u.storage_used_bytes} reported`);
      const after = await c.exec({
        capsule_id: 'fill',
        command: 'rm -f /tmp/fill /data/output/big; echo usable > /tmp/x && cat /tmp/x',
        timeout_ms: 10000,
      });
      t.equal(after.stdout, 'usable\n', 'usable afterwards');
      t.equal(after.oom_killed, false);
    }
    await c.destroy('fill');
  });

  await t.test('admission: a capsule the node cannot back is refused with capacity', async (t) => {
    await c.create({ capsule_id: 'big', memory_mb: 512 });
    const err = await c.create({ capsule_id: 'nofit', memory_mb: 256 }).catch((e: unknown) => e);
    t.ok(err instanceof RunnerError && err.code === 'capacity', `refused: ${String(err)}`);
    t.match((err as Error).message, /memory_mb: the node cannot back 256 MB now \(188 of 700 MB free\)/);
    const hello = await c.hello();
    t.equal(hello.capacity?.committed_mb, 512);
    t.equal(hello.capacity?.free_mb, 188);
    t.same(await c.list(), ['big'], 'nothing half-made is left');
    await c.create({ capsule_id: 'fits', memory_mb: 128 });
    await c.destroy('big');
    await c.create({ capsule_id: 'nofit', memory_mb: 256 });
    t.equal((await c.hello()).capacity?.committed_mb, 384, 'destroy releases what it committed');
    await c.destroy('fits');
    await c.destroy('nofit');
  });
});

t.test('uploads held by the runner at once are bounded (a quarter of runner_memory_mb)', async (t) => {
  // 512: bound 128 MB. (At 256, eight 40 MB frames decoded at once once got the runner OOM-killed in its leaf.)
  const r = await startRunner({ options: { runner_memory_mb: '512', tmpfs_mb: '1024' } });
  t.teardown(() => r.stop());
  const c = r.client;
  const cap = await c.create({ capsule_id: 'flood', memory_mb: 2048 }); // 1024 MB of storage: room for all six
  const body = Buffer.alloc(60 * MB, 0x41); // three at once are over the 128 MB bound
  // The capsule's writers are stopped while the uploads arrive, so that they are held at once
  // whatever this node's speed (a fast writer could otherwise finish each before the next). They
  // run as root in the capsule's writer leaf (charged.ts): found by that cgroup, not by uid.
  let holding = true;
  const inWriterLeaf = new RegExp(`:memory:.*/flood/${WRITER_LEAF}$`, 'm');
  const capsuleProcs = (): number[] =>
    readdirSync('/proc').flatMap((p) => {
      try {
        return /^\d+$/.test(p) &&
          (statSync(`/proc/${p}`).uid === cap.host_uid || inWriterLeaf.test(readFileSync(`/proc/${p}/cgroup`, 'utf8')))
          ? [Number(p)]
          : [];
      } catch {
        return [];
      }
    });
  const signalAll = (sig: NodeJS.Signals): void => {
    for (const pid of capsuleProcs())
      try {
        process.kill(pid, sig);
      } catch {
        /* gone */
      }
  };
  const holder = (async () => {
    while (holding) {
      signalAll('SIGSTOP');
      await new Promise((res) => setTimeout(res, 1));
    }
    signalAll('SIGCONT');
  })();
  let refusedOne!: () => void;
  const refused = new Promise<void>((res) => (refusedOne = res));
  const settled = Array.from({ length: 6 }, (_, i) =>
    c.upload('flood', `f${i}`, Buffer.from(body)).then(
      () => 'ok',
      (e: unknown) => {
        if (e instanceof RunnerError && e.code === 'capacity') refusedOne();
        return e instanceof RunnerError ? e.code : String(e);
      },
    ),
  );
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([refused, Promise.all(settled), new Promise((res) => (timer = setTimeout(res, 30_000)))]);
  clearTimeout(timer);
  holding = false;
  await holder;
  const results = await Promise.all(settled);
  t.ok(results.includes('capacity'), `some refused for a retry: ${results.join(',')}`);
  t.ok(results.includes('ok'), 'others accepted');
  t.ok(
    results.every((x) => x === 'ok' || x === 'capacity'),
    'nothing else',
  );
  const again = await c.upload('flood', 'later', Buffer.from(body));
  t.equal(again.size_bytes, 60 * MB, 'accepted once the others are written');
  t.equal(r.process.exitCode, null, 'the runner is fine');
});

t.test("an exec's sweep of leftover processes spares an upload being copied in", async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'sweep', memory_mb: 512 });
  const body = Buffer.alloc(64 * MB, 0x42);
  for (let i = 0; i < 3; i++) {
    // The upload's writer copies while the exec ends and its sweep kills the background sleep.
    const up = c.upload('sweep', `u${i}`, Buffer.from(body));
    const ex = c.exec({ capsule_id: 'sweep', command: 'sleep 30 & true', timeout_ms: 10000 });
    const [u, e] = await Promise.all([up, ex]);
    t.equal(u.size_bytes, 64 * MB, `upload ${i} complete`);
    t.equal(e.exit_code, 0);
  }
  const sizes = await c.exec({
    capsule_id: 'sweep',
    command: 'wc -c < /data/input/u0; wc -c < /data/input/u2',
    timeout_ms: 10000,
  });
  t.equal(sizes.stdout, `${64 * MB}\n${64 * MB}\n`, 'the files are whole');
});
