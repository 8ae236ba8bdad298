// Attack from inside a real capsule: a 9.2 EB sparse file, 1,000 hard links
// to one 50 MB file and a directory tree nested far past PATH_MAX. While the
// runner lists that capsule's outputs and destroys it, another capsule's
// exec and the runner's hello (its ready answer) stay within their idle
// latency, and the wipe evidence reports bytes that existed (bounded by the
// tmpfs), each inode once, with nothing left unwiped.
import t from 'tap';
import { existsSync } from 'node:fs';
import { startRunner } from '../helpers/runner.js';

const MiB = 1024 * 1024;

const ATTACK = String.raw`
import os
out = "/data/output"
with open(out + "/big", "wb") as f:
    for _ in range(50):
        f.write(os.urandom(1 << 20))
for i in range(1000):
    os.link(out + "/big", out + "/l%04d" % i)
f = os.open(out + "/sparse", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(f, 9200000000000000000)
os.pwrite(f, b"SPARSE" * 100, 1 << 40)
os.close(f)
fd = os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY)
for i in range(120):
    name = ("d%03d" % i) + "x" * 196
    os.mkdir(name, dir_fd=fd)
    n = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = n
g = os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
os.write(g, b"DEEP-SECRET" * 1000)
print("planted")
`;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function timed(f: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
}

t.test('a hostile capsule cannot stall another tenant while its files are listed and wiped', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'evil', memory_mb: 512 });
  await c.create({ capsule_id: 'good', memory_mb: 64 });
  const planted = await c.exec({
    capsule_id: 'evil',
    command: `/usr/bin/python3 -c '${ATTACK}'`,
    timeout_ms: 120000,
  });
  t.equal(planted.stdout, 'planted\n', planted.stderr);

  const goodExec = (): Promise<unknown> => c.exec({ capsule_id: 'good', command: 'true', timeout_ms: 10000 });
  // Idle figures, measured in this run on this (shared) machine, before the attack and after it.
  await goodExec();
  const idle = async (): Promise<{ exec: number; hello: number }> => {
    const exec: number[] = [];
    const hello: number[] = [];
    for (let i = 0; i < 7; i++) {
      exec.push(await timed(goodExec));
      hello.push(await timed(() => c.hello()));
    }
    return { exec: median(exec), hello: median(hello) };
  };
  const before = await idle();

  const duringExec: number[] = [];
  const duringHello: number[] = [];
  let busy = true;
  const attack = (async () => {
    const listed = await c.listOutput('evil');
    const destroyed = await c.destroy('evil');
    return { listed, destroyed };
  })().finally(() => {
    busy = false;
  });
  // Sample the other tenant for as long as the attack's list and destroy run (at least 5 samples).
  while (busy || duringExec.length < 5) {
    duringHello.push(await timed(() => c.hello()));
    duringExec.push(await timed(goodExec));
  }
  const { listed, destroyed } = await attack;
  // The other test file beside this one loads the machine unevenly: "idle" is the slower of the
  // figures before and after the attack (a stall the attack causes shows against both).
  const after = await idle();
  const idleE = Math.max(before.exec, after.exec);
  const idleH = Math.max(before.hello, after.hello);
  const durE = median(duringExec);
  const durH = median(duringHello);
  t.comment(
    `exec idle ${before.exec.toFixed(1)} / ${after.exec.toFixed(1)} ms (before / after), during ${durE.toFixed(1)} ms (max ${Math.max(...duringExec).toFixed(1)}); ` +
      `hello idle ${before.hello.toFixed(2)} / ${after.hello.toFixed(2)} ms, during ${durH.toFixed(2)} ms (max ${Math.max(...duringHello).toFixed(1)}); ` +
      `${duringExec.length} samples`,
  );
  // Margins: the machine is shared by parallel work (2 cores); before the fix one list call never returned.
  t.ok(durE < 2 * idleE + 50, `other tenant's exec median stays under 2x idle + 50 ms`);
  t.ok(durH < 2 * idleH + 20, `runner hello median stays under 2x idle + 20 ms`);
  t.ok(Math.max(...duringHello) < 10 * idleH + 300, 'no hello waits behind the attack');

  const big = listed.find((f) => f.filename === 'big')!;
  t.match(big.sha512, /^sha512:[0-9a-f]{128}$/);
  t.equal(listed.filter((f) => f.filename.startsWith('l')).length, 1000);
  t.ok(
    listed.filter((f) => f.filename.startsWith('l')).every((f) => f.sha512 === big.sha512),
    'each link carries the digest of its inode',
  );
  const sparse = listed.find((f) => f.filename === 'sparse')!;
  t.equal(sparse.sha512, null, 'the 9.2 EB file is listed unhashed (more than the tmpfs holds)');
  t.ok(sparse.size_bytes > 9e18);

  const step3 = destroyed.evidence[2] as Record<string, unknown>;
  t.equal(step3['performed'], true, String(step3['reason']));
  t.notOk('reason' in step3, 'no reason: nothing was left');
  t.equal(step3['not_overwritten'], 0);
  t.equal(step3['hard_links_deduplicated'], 1000, 'the 1,000 extra names were not wiped again');
  const bytes = destroyed.wipe.bytes_overwritten;
  const capacity = step3['tmpfs_capacity_bytes'] as number;
  t.equal(capacity, 256 * MiB, 'capacity measured by statfs of the capsule tmpfs');
  t.ok(bytes >= 50 * MiB + 11000, `the 50 MB inode, the sparse data page and the deep file: ${bytes}`);
  t.ok(bytes <= 50 * MiB + MiB, 'bytes that existed, not 1,000 times 50 MB nor 9.2 EB');
  t.ok(bytes <= capacity && bytes <= (step3['tmpfs_used_bytes_before'] as number), 'bounded by the tmpfs');
  t.equal(destroyed.wipe.readback_verified, true);
  t.equal((destroyed.evidence[5] as Record<string, unknown>)['performed'], true);
  t.notOk(existsSync(`${r.stateDir}/capsules/evil`), 'the tmpfs and everything under it are gone');
  t.same(await c.list(), ['good']);
  t.notMatch(r.stderr(), /wipe worker failed/, 'the wipe ran in a worker thread, not on the serving loop');
});

const FILL = String.raw`
import os
f = os.open("/data/output/sparse", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(f, 8 << 20)
for off in (0, 3 << 20, (8 << 20) - 4096):
    os.pwrite(f, b"HOLE-SECRET" * 300, off)
os.close(f)
n = 0
try:
    with open("/tmp/fill", "wb") as g:
        while True:
            g.write(b"FILL" * 16384)
            g.flush()
            n += 1
except OSError as e:
    print("full", e.errno == 28)
`;

t.test('a capsule that fills its tmpfs around a sparse file: wiped without ENOSPC, stated, gone', async (t) => {
  const r = await startRunner({ options: { tmpfs_mb: '16' } });
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'full', memory_mb: 128 });
  const res = await c.exec({ capsule_id: 'full', command: `/usr/bin/python3 -c '${FILL}'`, timeout_ms: 60000 });
  t.equal(res.stdout, 'full True\n', `the tmpfs is full (ENOSPC inside): ${res.stderr}`);
  const d = await c.destroy('full');
  const step3 = d.evidence[2] as Record<string, unknown>;
  // Only the pages the sparse file holds are written, so the full tmpfs never has to allocate one.
  t.equal(step3['performed'], true, String(step3['reason']));
  t.equal(step3['not_overwritten'], 0);
  t.same(step3['errors'], []);
  t.equal(step3['tmpfs_capacity_bytes'], 16 * MiB);
  t.ok(d.wipe.bytes_overwritten <= 16 * MiB, `bounded by the tmpfs: ${d.wipe.bytes_overwritten}`);
  t.ok(d.wipe.bytes_overwritten >= 15 * MiB, 'the fill file and the sparse file data were overwritten');
  t.equal(d.wipe.readback_verified, true);
  t.notOk(existsSync(`${r.stateDir}/capsules/full`), 'the files are gone with the tmpfs');
  t.notMatch(r.stderr(), /wipe worker failed/);
});

t.test('without the extent helper the same capsule meets ENOSPC, and step 3 says so with the reason', async (t) => {
  // wipe_sparse_helper=0: the path a host without python3 takes (whole-file writes).
  const r = await startRunner({ options: { tmpfs_mb: '16', wipe_sparse_helper: '0' } });
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'nospc', memory_mb: 128 });
  // The wipe frees nothing, so the fallback meets a full tmpfs when it writes the sparse file's holes.
  const res = await c.exec({ capsule_id: 'nospc', command: `/usr/bin/python3 -c '${FILL}'`, timeout_ms: 60000 });
  t.equal(res.stdout, 'full True\n', res.stderr);
  const d = await c.destroy('nospc');
  const step3 = d.evidence[2] as Record<string, unknown>;
  t.equal(step3['performed'], false, 'the wipe did not fully happen');
  t.equal(step3['reason'], '1 entry not overwritten: ENOSPC', 'and the evidence says why, for the signed view');
  t.equal(step3['not_overwritten'], 1);
  t.same(step3['errors'], ['wipe: ENOSPC (1)'], 'errno and count, no file names');
  t.match(d.evidence[5], { performed: false, reason: '1 entry not overwritten: ENOSPC' });
  t.ok(d.wipe.bytes_overwritten <= 16 * MiB, 'still bounded by the tmpfs');
  t.notOk(existsSync(`${r.stateDir}/capsules/nospc`), 'the files are gone with the tmpfs all the same');
});
