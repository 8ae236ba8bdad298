// Resource attacks (contained, host unharmed) and exec semantics: timeout,
// OOM, no process outliving an exec, bounded output, input never in argv.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { FORK_LOOP_AT_BOUND, liveProcs, startRunner } from '../helpers/runner.js';
import { until } from '../helpers/until.js';

t.test('resource attacks and exec semantics', async (t) => {
  const r = await startRunner({
    options: { tmpfs_mb: '16', tmpfs_inodes: '512', max_output_bytes: '4096', kill_grace_ms: '300', pids_max: '64' },
  });
  t.teardown(() => r.stop());
  const c = r.client;
  const cap = await c.create({ capsule_id: 'res', memory_mb: 256 });

  await t.test('fork bomb is stopped by pids.max and the host is fine', async (t) => {
    const res = await c.exec({
      capsule_id: 'res',
      command: 'bomb() { bomb | bomb & }; bomb; sleep 2',
      timeout_ms: 4000,
    });
    t.ok(res.exit_code !== undefined);
    t.same(await liveProcs(cap.host_uid), [], 'no process survives the exec');
    // A loop that keeps forking at the bound is stopped, not left to churn the node's kernel
    // (every refused fork copies and tears down an address space) until its timeout.
    const loop = await c.exec({
      capsule_id: 'res',
      command: FORK_LOOP_AT_BOUND,
      timeout_ms: 6000,
    });
    t.equal(loop.process_limit_killed, true, 'stopped for hitting the process bound again and again');
    t.equal(loop.exit_code, 137);
    t.equal(loop.timed_out, false);
    t.equal(loop.oom_killed, false);
    t.ok(loop.duration_ms < 3000, `stopped ${loop.duration_ms} ms after its start, not at its 6 s timeout`);
    t.same(await liveProcs(cap.host_uid), [], 'no process survives the stopped exec');
    const py = await c.exec({
      capsule_id: 'res',
      command: `python3 -c "
import os
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            import time; time.sleep(3); os._exit(0)
        n += 1
except OSError as e:
    print('stopped', n, e.errno)
"`,
      timeout_ms: 10000,
    });
    const m = /stopped (\d+) 11/.exec(py.stdout);
    t.ok(m, `fork refused with EAGAIN: ${py.stdout} ${py.stderr}`);
    t.ok(m && Number(m[1]) < 64, 'at most pids.max processes');
    t.equal(py.process_limit_killed, false, 'a program that meets the bound once and stops forking runs on');
    t.equal(py.exit_code, 0);
    // 100 refused forks in a few ms, then quiet: one look (or two, if the burst straddles them) sees
    // them all. Two looks in a row are not needed: the burst alone is a fork loop (a bomb's first
    // look finds 70-140), stopped at once instead of after a second look 50 ms later.
    const burst = await c.exec({
      capsule_id: 'res',
      command: `python3 -c "
import os, time
refused = 0
while refused < 100:
    try:
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
    except OSError:
        refused += 1
time.sleep(2)
print('ran on')
"`,
      timeout_ms: 10000,
    });
    t.equal(burst.process_limit_killed, true, `a burst of refused forks is stopped: ${burst.stdout}`);
    t.ok(burst.duration_ms < 1500, `${burst.duration_ms} ms after its start, not after its 2 s sleep`);
    const after = await c.exec({ capsule_id: 'res', command: 'echo alive', timeout_ms: 5000 });
    t.equal(after.stdout, 'alive\n', 'capsule usable after the bomb');
  });

  await t.test('memory bomb is OOM-killed and reported', async (t) => {
    const mem = await c.create({ capsule_id: 'mem', memory_mb: 64 });
    const res = await c.exec({
      capsule_id: 'mem',
      command: 'python3 -c "a = []\nwhile True: a.append(bytearray(8 << 20))"',
      timeout_ms: 20000,
    });
    t.equal(res.oom_killed, true, 'oom_killed reported');
    t.equal(res.exit_code, 137);
    t.equal(res.timed_out, false);
    t.same(await liveProcs(mem.host_uid), []);
    const ok = await c.exec({ capsule_id: 'mem', command: 'echo fine', timeout_ms: 5000 });
    t.equal(ok.stdout, 'fine\n');
    t.equal(ok.oom_killed, false, 'the next exec is not marked OOM');
    await c.destroy('mem');
  });

  await t.test('filling the tmpfs gives ENOSPC', async (t) => {
    const res = await c.exec({
      capsule_id: 'res',
      command: 'dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo rc=$?',
      timeout_ms: 20000,
    });
    t.match(res.stdout, /No space left on device/);
    t.match(res.stdout, /rc=1/);
    await t.rejects(c.upload('res', 'more.bin', Buffer.alloc(1024 * 1024)), { code: 'no_space' });
    const list = await c.exec({
      capsule_id: 'res',
      command: 'ls /data/input; rm /tmp/fill; echo done',
      timeout_ms: 5000,
    });
    t.notMatch(list.stdout, /more\.bin/, 'no half-written upload left');
    t.match(list.stdout, /done/);
    const files = await c.exec({
      capsule_id: 'res',
      command:
        'mkdir /tmp/many; i=0; while [ $i -lt 2000 ]; do echo > /tmp/many/$i || break; i=$((i+1)); done; echo made=$i; rm -rf /tmp/many',
      timeout_ms: 20000,
    });
    const made = Number(/made=(\d+)/.exec(files.stdout)?.[1]);
    t.ok(made > 0 && made < 512, `inode bound stops file creation (${made})`);
    t.match(files.stderr, /No space left on device/);
  });

  await t.test('CPU spin past the timeout: SIGTERM, then SIGKILL after the grace', async (t) => {
    const t0 = Date.now();
    const res = await c.exec({ capsule_id: 'res', command: 'while :; do :; done', timeout_ms: 700 });
    const took = Date.now() - t0;
    t.equal(res.timed_out, true);
    t.ok(took < 700 + 300 + 2000, `returned in ${took} ms`);
    t.ok(res.exit_code >= 128, `killed by a signal (${res.exit_code})`);
    const stubborn = await c.exec({ capsule_id: 'res', command: 'trap "" TERM; while :; do :; done', timeout_ms: 500 });
    t.equal(stubborn.timed_out, true);
    t.equal(stubborn.exit_code, 137, 'SIGKILL after the grace for a process ignoring SIGTERM');
    t.same(await liveProcs(cap.host_uid), []);
  });

  await t.test('no process of an exec outlives it', async (t) => {
    const res = await c.exec({
      capsule_id: 'res',
      command: '(sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & setsid sleep 300 >/dev/null 2>&1 & echo started',
      timeout_ms: 5000,
    });
    t.equal(res.stdout, 'started\n');
    t.same(await liveProcs(cap.host_uid), [], 'background processes were killed');
    const ps = await c.exec({ capsule_id: 'res', command: 'ls /proc | grep -cE "^[0-9]+$"', timeout_ms: 5000 });
    t.ok(Number(ps.stdout) <= 4, 'a new exec sees no leftovers');
  });

  await t.test('stdout and stderr are bounded and say so', async (t) => {
    const res = await c.exec({
      capsule_id: 'res',
      command: 'head -c 100000 /dev/zero | tr "\\0" a; head -c 5000 /dev/zero | tr "\\0" b >&2; echo tail',
      timeout_ms: 5000,
    });
    t.equal(res.stdout.length, 4096);
    t.equal(res.stdout_truncated, true);
    t.equal(res.stderr.length, 4096);
    t.equal(res.stderr_truncated, true);
    const small = await c.exec({ capsule_id: 'res', command: 'echo hi', timeout_ms: 5000 });
    t.equal(small.stdout_truncated, false);
  });

  await t.test('input bytes never appear in any argv', async (t) => {
    const marker = `INPUTMARK${randomBytes(16).toString('hex')}`;
    const pending = c.exec({
      capsule_id: 'res',
      // Reads the marker from the file (never from its own argv) and looks for it in every visible argv.
      command: `sleep 1; python3 -c "
import glob
m = open('/data/input/data', 'rb').read()
print(sum(1 for p in glob.glob('/proc/[0-9]*/cmdline') if m in open(p, 'rb').read()))
"; wc -c < /data/input/data`,
      input_b64: Buffer.from(marker).toString('base64'),
      timeout_ms: 10000,
    });
    await new Promise((res) => setTimeout(res, 500));
    let found = 0;
    for (const p of readdirSync('/proc')) {
      if (!/^\d+$/.test(p)) continue;
      try {
        if (readFileSync(`/proc/${p}/cmdline`).includes(marker)) found++;
        if (readFileSync(`/proc/${p}/environ`).includes(marker)) found++;
      } catch {
        /* gone */
      }
    }
    t.equal(found, 0, 'marker absent from every host cmdline and environ');
    const res = await pending;
    t.equal(res.stdout.trim().split('\n').pop(), String(marker.length), 'the command got the input via the tmpfs file');
    t.equal(res.stdout.trim().split('\n')[0], '0', 'not in argv inside the capsule either');
  });

  await t.test('concurrent execs on one capsule are serialized, others run in parallel', async (t) => {
    await c.create({ capsule_id: 'par', memory_mb: 64 });
    const [a, b, p] = await Promise.all([
      c.exec({ capsule_id: 'res', command: 'echo a > /tmp/order; sleep 0.3; cat /tmp/order', timeout_ms: 5000 }),
      c.exec({ capsule_id: 'res', command: 'echo b > /tmp/order; cat /tmp/order', timeout_ms: 5000 }),
      c.exec({ capsule_id: 'par', command: 'echo p', timeout_ms: 5000 }),
    ]);
    t.equal(a.stdout, 'a\n');
    t.equal(b.stdout, 'b\n');
    t.equal(p.stdout, 'p\n');
    await c.destroy('par');
  });

  await t.test('destroy while a command runs kills it and reports it', async (t) => {
    await c.create({ capsule_id: 'busy', memory_mb: 64 });
    const running = c.exec({ capsule_id: 'busy', command: 'sleep 30', timeout_ms: 60000 });
    await new Promise((res) => setTimeout(res, 300));
    const d = await c.destroy('busy');
    t.equal(d.command_was_running, true);
    const res = await running;
    t.ok(res.exit_code >= 128, 'the running command was killed');
    t.equal((d.evidence[7] as Record<string, unknown>)['cgroup_empty'], true);
  });
});

t.test('CPU weights: the capsules together below the services, one tenant as one capsule', async (t) => {
  const cpuGroup = (pid: number | 'self'): string | undefined =>
    /^\d+:cpu(?:,cpuacct)?:(.*)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1];
  const before = cpuGroup('self');
  const r = await startRunner({ options: { capsules_cpu_weight: '10' } });
  t.teardown(() => r.stop());
  const name = r.process.spawnargs.find((a) => a.startsWith('--cgroup_name='))!.split('=')[1]!;
  const own = cpuGroup(r.process.pid!);
  if (own === undefined) {
    t.comment('no cgroup v1 cpu hierarchy here (the v2 weight of the runner leaf is set instead)');
    return;
  }
  // The runner and its supervisor (here this test, its parent) sit in the services' group beside the capsules'.
  t.ok(own.endsWith(`/${name}.services`), `the runner is in its services' group (${own})`);
  t.equal(cpuGroup('self'), own, 'and so is the process that started it (exit_with_parent: capsule serve)');
  const services = `/sys/fs/cgroup/cpu/${own}`.replace(/\/+/g, '/');
  t.equal(readFileSync(`${services}/cpu.shares`, 'utf8').trim(), '10240', 'services_cpu_weight 1,000: ten threads');
  const v1 = services.replace(/\.services$/, '');
  await r.client.create({ capsule_id: 'cpu-weight', memory_mb: 64 });
  t.equal(
    readFileSync(`${v1}/cpu.shares`, 'utf8').trim(),
    '102',
    'the capsules group: capsules_cpu_weight 10, a tenth of one thread',
  );
  t.ok(readdirSync(v1).includes('cpu-weight'), 'each capsule is inside that group (its own cpu.shares below it)');
  await r.client.destroy('cpu-weight');

  // One tenant weighs one capsule's share however many capsules it runs.
  const shares = (id: string): string => readFileSync(`${v1}/${id}/cpu.shares`, 'utf8').trim();
  for (const id of ['ta-1', 'ta-2', 'ta-3']) await r.client.create({ capsule_id: id, memory_mb: 64, tenant: 'acct-a' });
  await r.client.create({ capsule_id: 'tb-1', memory_mb: 64, tenant: 'acct-b' });
  t.same(
    ['ta-1', 'ta-2', 'ta-3', 'tb-1'].map(shares),
    ['341', '341', '341', '1024'],
    'three capsules of one tenant share what one capsule of another has',
  );
  await r.client.destroy('ta-3');
  t.same(['ta-1', 'ta-2'].map(shares), ['512', '512'], 'a destroy gives the share back to the rest');
  await t.rejects(
    r.client.create({ capsule_id: 'tc-1', memory_mb: 64, tenant: 'no spaces allowed' }),
    /tenant/,
    'a malformed tenant label is refused',
  );

  // The quick lane beside the capsules group (quick_cpu_weight, default 1,000: 10,240 shares),
  // capped at half the CPUs (at least one) per 20 ms period.
  const quick = `${v1}.quick`;
  t.equal(readFileSync(`${quick}/cpu.shares`, 'utf8').trim(), '10240', 'the quick lane weighs as much as the services');
  t.equal(readFileSync(`${quick}/cpu.cfs_period_us`, 'utf8').trim(), '20000');
  t.equal(
    readFileSync(`${quick}/cpu.cfs_quota_us`, 'utf8').trim(),
    String(20000 * Math.max(1, Math.floor(availableParallelism() / 2))),
    'capped at half the CPUs',
  );
  const procs = (dir: string): string[] => readFileSync(`${dir}/cgroup.procs`, 'utf8').split('\n').filter(Boolean);
  // Light is earned (light-tenants.ts): each tenant below has run one exec of its own first.
  await r.client.create({ capsule_id: 'tc-0', memory_mb: 64, tenant: 'acct-c' });
  for (const id of ['ta-1', 'tb-1', 'tc-0'])
    await r.client.exec({ capsule_id: id, command: 'true', timeout_ms: 10000 });
  await r.client.create({ capsule_id: 'tc-1', memory_mb: 64, tenant: 'acct-c' });
  t.ok(existsSync(`${quick}/tc-1`), 'each capsule has its group in the lane too');
  // Its upload writer, started ahead, is in the capsule's CPU group too (here the lane's): the bytes it
  // copies for a tenant are that tenant's CPU, not the services'.
  const mem = /^\d+:memory:(.*)$/m.exec(readFileSync(`/proc/${r.process.pid}/cgroup`, 'utf8'))![1]!;
  // The runner itself sits in its subtree's .runner leaf (memory).
  const writerLeaf = `/sys/fs/cgroup/memory/${mem.replace(/\/\.runner$/, '')}/tc-1/writer`.replace(/\/+/g, '/');
  let writers: string[] = [];
  for (let i = 0; i < 100 && writers.length === 0; i++) {
    await new Promise((res) => setTimeout(res, 20));
    writers = procs(writerLeaf);
  }
  t.equal(writers.length, 1, 'one writer waits in the writer leaf');
  t.ok(procs(`${quick}/tc-1`).includes(writers[0]!), "and in the capsule's CPU group (the quick lane's)");

  // A CPU-bound exec runs at a sixteenth of its capsule's weight until it ends; a sleeping one is left alone.
  // The sleeper starts first and is asleep before the spinner starts: started together in the quick lane,
  // its start waited for a CPU behind the spinner on a loaded node, and waiting counts as runnable.
  const sleeper = r.client.exec({ capsule_id: 'ta-1', command: 'sleep 4', timeout_ms: 10000 });
  await new Promise((res) => setTimeout(res, 500));
  const spin = r.client.exec({
    capsule_id: 'tb-1',
    command: "timeout 3 sh -c 'while :; do :; done'; true",
    timeout_ms: 10000,
  });
  // Looked at until lowered (the first 200 ms window ends after the exec started, late on a loaded node).
  let seen: string[] = [];
  for (let i = 0; i < 50 && seen[0] !== '64'; i++) {
    await new Promise((res) => setTimeout(res, 50));
    seen = ['tb-1', 'ta-1'].map(shares);
  }
  t.same(seen, ['64', '512'], 'the spinning capsule is lowered, the sleeping one is not');
  // The spinner started in the quick lane (its tenant had run one instant exec) and left it once CPU-bound.
  t.same(procs(`${quick}/tb-1`), [], 'the CPU-bound exec has left the quick lane');
  t.ok(procs(`${v1}/tb-1`).length > 0, 'it runs in the capsules group, lowered');
  t.ok(procs(`${quick}/ta-1`).length > 0, 'the sleeping exec stays in the quick lane');
  await Promise.all([spin, sleeper]);
  t.same(['tb-1', 'ta-1'].map(shares), ['1024', '512'], 'the weight is back once the exec ended');
  // Where cpuacct is its own hierarchy (hybrid), each capsule has an accounting group there that every
  // process of it joins: the CPU its execs used, exited processes included (light-tenants.ts).
  const acctOwn = /^\d+:cpuacct:(.*)$/m.exec(readFileSync(`/proc/${r.process.pid}/cgroup`, 'utf8'))?.[1];
  if (acctOwn !== undefined) {
    const acct = `/sys/fs/cgroup/cpuacct/${acctOwn}/${name}`.replace(/\/+/g, '/');
    const usedMs = (id: string): number => Number(readFileSync(`${acct}/${id}/cpuacct.usage`, 'utf8')) / 1e6;
    t.ok(usedMs('tb-1') > 200, `the spinner's capsule used ${Math.round(usedMs('tb-1'))} ms of CPU`);
    t.ok(usedMs('ta-1') < 200, `the sleeper's used ${Math.round(usedMs('ta-1'))} ms`);
  }

  // A tenant that has just used 3 s of CPU is not light: its next exec runs in the capsules group. One
  // whose 4 s exec slept is: what counts is the CPU its processes used, not how long they took (on a
  // busy node a light tenant's commands wait for a CPU, and their wall time would make it heavy).
  const after = r.client.exec({ capsule_id: 'tb-1', command: 'sleep 1', timeout_ms: 10000 });
  const fresh = r.client.exec({ capsule_id: 'tc-1', command: 'sleep 1', timeout_ms: 10000 });
  const slept = r.client.exec({ capsule_id: 'ta-1', command: 'sleep 1', timeout_ms: 10000 });
  await new Promise((res) => setTimeout(res, 500));
  t.ok(procs(`${v1}/tb-1`).length > 0 && procs(`${quick}/tb-1`).length === 0, 'a busy tenant: capsules group');
  t.ok(procs(`${quick}/tc-1`).length > 0 && procs(`${v1}/tc-1`).length === 0, 'a light tenant: quick lane');
  if (acctOwn !== undefined) {
    // Its command's own process, found in whichever group it runs (ta-1's upload writer, started with the
    // capsule before its tenant had run anything, waits in the capsules group), once it has started:
    // 500 ms were once not enough with the other runner tests beside this one.
    const sleepIn = (dir: string): boolean =>
      procs(dir).some((pid) => {
        try {
          return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'sleep';
        } catch {
          return false;
        }
      });
    await until(() => sleepIn(`${quick}/ta-1`) || sleepIn(`${v1}/ta-1`), 5000, 100);
    t.ok(sleepIn(`${quick}/ta-1`), 'a tenant whose long exec slept: its next command runs in the quick lane');
  }
  await Promise.all([after, fresh, slept]);

  // A tenant this node has never seen is not trusted with the lane: its first exec runs in the capsules group.
  await r.client.create({ capsule_id: 'td-1', memory_mb: 64, tenant: 'acct-d' });
  const first = r.client.exec({ capsule_id: 'td-1', command: 'sleep 1', timeout_ms: 10000 });
  await new Promise((res) => setTimeout(res, 500));
  t.ok(procs(`${v1}/td-1`).length > 0 && procs(`${quick}/td-1`).length === 0, 'a new tenant: capsules group');
  await first;
  for (const id of ['ta-1', 'ta-2', 'tb-1', 'tc-0', 'tc-1', 'td-1']) await r.client.destroy(id);
  t.notOk(existsSync(`${quick}/tc-1`), "a destroyed capsule's quick-lane group is removed");
  await r.stop();
  t.equal(cpuGroup('self'), before, 'a graceful stop moves the supervisor back');
  t.notOk(existsSync(services), "and removes the services' group");
});
