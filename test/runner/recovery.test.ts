// A runner killed with SIGKILL leaves capsules behind (tmpfs mounted, a
// command still running); the next runner on the same state dir wipes and
// removes them and reports them in hello.lost.
import t from 'tap';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { liveProcsNow, ownState, startRunner } from '../helpers/runner.js';

t.test('recovery after SIGKILL of the runner', async (t) => {
  const { stateDir, uidBlock } = ownState(t, 'capsule-recovery-', 64);
  const first = await startRunner({ stateDir, uidBlock });
  const c = first.client;
  const a = await c.create({ capsule_id: 'lost-a', memory_mb: 64 });
  await c.create({ capsule_id: 'lost-b', memory_mb: 64 });
  // An egress capsule: its relay and network namespace must be cleaned up too.
  const proxyDir = mkdtempSync(join(tmpdir(), 'capsule-recovery-proxy-'));
  const proxy = createServer((s) => s.end());
  await new Promise<void>((res) => proxy.listen(join(proxyDir, 'p.sock'), res));
  t.teardown(() => {
    proxy.close();
    rmSync(proxyDir, { recursive: true, force: true });
  });
  await c.create({
    capsule_id: 'lost-e',
    memory_mb: 64,
    egress: {
      proxy_socket: join(proxyDir, 'p.sock'),
      ca_pem: '-----BEGIN CERTIFICATE-----\nQQ==\n-----END CERTIFICATE-----',
    },
  });
  const netns = (
    JSON.parse(readFileSync(join(stateDir, 'capsules/lost-e.json'), 'utf8')) as { egress: { netns: string } }
  ).egress.netns;
  t.ok(existsSync(`/run/netns/${netns}`), 'egress namespace exists');
  const marker = `LOST${randomBytes(8).toString('hex')}`;
  t.equal(
    (
      await c.exec({
        capsule_id: 'lost-a',
        command: `yes ${marker} | head -c 100000 > /data/output/m`,
        timeout_ms: 10000,
      })
    ).exit_code,
    0,
  );
  const running = c.exec({ capsule_id: 'lost-a', command: 'sleep 600', timeout_ms: 600000 }).catch((e: unknown) => e);
  await new Promise((r) => setTimeout(r, 300));
  t.ok(liveProcsNow(a.host_uid).length > 0, 'a command is running');
  const fd = openSync(join(stateDir, 'capsules/lost-a/output/m'), 'r');

  await first.kill();
  t.match(await running, { code: 'unavailable' }, 'the in-flight exec fails cleanly on the client');
  t.ok(existsSync(join(stateDir, 'capsules/lost-a.json')), 'state left behind by the crash');

  const second = await startRunner({ stateDir, uidBlock });
  t.teardown(() => second.stop());
  const hello = await second.client.hello();
  const lost = hello.lost.map((l) => l.capsule_id).sort();
  t.same(lost, ['lost-a', 'lost-b', 'lost-e']);
  t.notOk(existsSync(`/run/netns/${netns}`), 'egress namespace removed by recovery');
  const la = hello.lost.find((l) => l.capsule_id === 'lost-a')!;
  t.equal(la.wipe?.readback_verified, true);
  t.ok((la.wipe?.bytes_overwritten ?? 0) >= 100000);
  t.match(la.recovered_at, /\.\d{6}Z$/);
  // The recovery evidence the control plane carries into the partial proof.
  // bwrap --die-with-parent took the sandbox down with the runner: recovery finds nothing left to kill.
  t.equal(la.recovery?.processes_killed, 0, 'processes found at recovery, as measured');
  t.match(la.recovery, {
    cgroup_empty: true,
    cgroup_removed: true,
    tmpfs_was_mounted: true,
    tmpfs_unmounted: true,
    egress: null,
    state_removed: true,
  });
  t.same(la.recovery?.wipe, la.wipe, 'the wipe report is the one measured');
  const le = hello.lost.find((l) => l.capsule_id === 'lost-e')!;
  t.same(le.recovery?.egress, { relay_stopped: true, netns_removed: true, proxy_socket_removed: true });
  t.notOk(existsSync(join(proxyDir, 'p.sock')), 'the egress proxy socket file was removed');
  t.same(liveProcsNow(a.host_uid), [], 'the orphaned command was killed');
  t.same(await second.client.list(), [], 'lost capsules are not live');
  t.notOk(readFileSync('/proc/self/mountinfo', 'utf8').includes(join(stateDir, 'capsules')), 'tmpfs unmounted');
  t.notOk(existsSync(join(stateDir, 'capsules/lost-a.json')));
  const buf = Buffer.alloc(100000);
  readSync(fd, buf, 0, buf.length, 0);
  closeSync(fd);
  t.equal(buf.indexOf(marker), -1, 'the bytes were wiped before unmount');
  // the uid range is usable again
  const again = await second.client.create({ capsule_id: 'lost-a', memory_mb: 64 });
  t.equal(
    (await second.client.exec({ capsule_id: again.capsule_id, command: 'ls /data/output | wc -l', timeout_ms: 5000 }))
      .stdout,
    '0\n',
    'a fresh capsule of the same id starts empty',
  );
});
