// Runs INSIDE the cgroup v2 guest (scripts/cgroup-v2-guest.mjs), started by
// test/runner/cgroup-v2.test.ts: drives a real runner through the resource
// checks and writes what it measured to a JSON report (argv[2]). It asserts
// nothing itself; the host test asserts on the report, so a check that did
// not run shows up as a missing or errored section.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { release } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { CgroupManager, killGroup, removeGroup, RUNNER_LEAF } from '../../sandbox-runner/cgroup.js';
import { FORK_LOOP_AT_BOUND, liveProcs, startRunner, type StartedRunner } from '../helpers/runner.js';

const CG = '/sys/fs/cgroup';
/** Where systemd would put a `capsule serve` unit; the driver plays capsule serve (it spawns the runner). */
const SERVICE_CGROUP = join(CG, 'system.slice', 'capsule.service');

const report: Record<string, unknown> = { started_uptime_s: uptime() };
const out = process.argv[2] ?? '/share/report.json';

function uptime(): number {
  return Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
}

function read(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

/** "key value" lines (memory.events, pids.events) as an object. */
function keyed(path: string): Record<string, number> | null {
  const text = read(path);
  if (text === null) return null;
  return Object.fromEntries(text.split('\n').map((l) => [l.split(' ')[0], Number(l.split(' ')[1])]));
}

function cgroupOf(pid: number | 'self'): string | null {
  return read(`/proc/${pid}/cgroup`);
}

/** The capsule's cgroup directory, wherever the runner put it under the service cgroup. */
function findGroup(name: string, dir = SERVICE_CGROUP): string | null {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const p = join(dir, e.name);
    if (e.name === name) return p;
    const deeper = findGroup(name, p);
    if (deeper) return deeper;
  }
  return null;
}

/** The kernel's OOM lines: which processes the memory cgroup OOM killer took. */
function kernelOomLog(): string[] {
  const r = spawnSync('dmesg', [], { encoding: 'utf8' });
  return (r.stdout ?? '').split('\n').filter((l) => /Killed process|oom.group|out of memory/i.test(l));
}

/** Runs one section; its result (or the error) goes into the report under name. */
async function section(name: string, fn: () => Promise<Record<string, unknown>>): Promise<void> {
  const t0 = Date.now();
  try {
    report[name] = { ...(await fn()), ms: Date.now() - t0 };
  } catch (e) {
    report[name] = { error: e instanceof Error ? `${e.message}\n${e.stack ?? ''}` : String(e), ms: Date.now() - t0 };
  }
  writeFileSync(out, JSON.stringify(report, null, 2));
}

const OPTIONS = { pids_max: '64', cpu_weight: '50', kill_grace_ms: '300', tmpfs_mb: '32' };

async function main(): Promise<void> {
  await section('environment', async () => {
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' - ')[1]?.split(' ')[0] ?? '')
      .filter((f) => f.startsWith('cgroup'));
    // The driver joins the service cgroup, as systemd would start `capsule serve`; the runner is its child.
    mkdirSync(SERVICE_CGROUP, { recursive: true });
    writeFileSync(join(CG, 'system.slice', 'cgroup.subtree_control'), '+cpu +memory +pids');
    writeFileSync(join(SERVICE_CGROUP, 'cgroup.procs'), String(process.pid));
    return {
      kernel: release(),
      cgroup_fstypes: mounts,
      root_controllers: read(join(CG, 'cgroup.controllers')),
      swaps: read('/proc/swaps'),
      driver_cgroup: cgroupOf('self'),
    };
  });

  let r: StartedRunner | null = null;
  await section('start', async () => {
    const t0 = Date.now();
    r = await startRunner({ options: OPTIONS });
    const startMs = Date.now() - t0;
    const hello = await r.client.hello();
    return {
      runner_start_ms: startMs,
      host: hello.host,
      runner_cgroup: cgroupOf(r.process.pid!),
      driver_cgroup: cgroupOf('self'),
      stderr: r.stderr(),
    };
  });
  const runner = r as StartedRunner | null;
  if (!runner) return;
  const c = runner.client;

  let hostUid = -1;
  let execMs = 1000;
  let memDir: string | null = null;
  await section('limits', async () => {
    const cap = await c.create({ capsule_id: 'lim', memory_mb: 64 });
    hostUid = cap.host_uid;
    memDir = findGroup('lim');
    if (!memDir) throw new Error('no cgroup directory named lim under the service cgroup');
    const f = (n: string): string | null => read(join(memDir!, n));
    const t0 = Date.now();
    const first = await c.exec({ capsule_id: 'lim', command: 'true', timeout_ms: 30000 });
    execMs = Date.now() - t0;
    return {
      exec_true: { exit_code: first.exit_code, wall_ms: execMs },
      path: memDir,
      memory_max: f('memory.max'),
      memory_swap_max: f('memory.swap.max'),
      memory_oom_group: f('memory.oom.group'),
      pids_max: f('pids.max'),
      cpu_weight: f('cpu.weight'),
      procs_idle: f('cgroup.procs'),
    };
  });

  await section('oom', async () => {
    // Sleepers beside the hog: none may survive it.
    const res = await c.exec({
      capsule_id: 'lim',
      command: 'sleep 300 & sleep 300 & python3 -c "a = []\nwhile True: a.append(bytearray(8 << 20))"',
      timeout_ms: 60000,
    });
    const after = await c.exec({ capsule_id: 'lim', command: 'echo fine', timeout_ms: 20000 });
    return {
      exit_code: res.exit_code,
      oom_killed: res.oom_killed,
      timed_out: res.timed_out,
      stderr: res.stderr.slice(-500),
      memory_events: memDir ? keyed(join(memDir, 'memory.events')) : null,
      memory_swap_current: memDir ? read(join(memDir, 'memory.swap.current')) : null,
      live_after: await liveProcs(hostUid),
      kernel_log: kernelOomLog(),
      next_stdout: after.stdout,
      next_oom_killed: after.oom_killed,
    };
  });

  await section('pids', async () => {
    const res = await c.exec({
      capsule_id: 'lim',
      command: `python3 -c "
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
except OSError as e:
    print('stopped', n, e.errno)
"`,
      timeout_ms: 60000,
    });
    const events = memDir ? keyed(join(memDir, 'pids.events')) : null;
    const liveAfter = await liveProcs(hostUid);
    // A loop that keeps forking at the bound: stopped by the runner (v2 reads pids.events in the capsule group).
    const loop = await c.exec({
      capsule_id: 'lim',
      command: FORK_LOOP_AT_BOUND,
      timeout_ms: 60000,
    });
    return {
      stdout: res.stdout,
      stderr: res.stderr.slice(-500),
      process_limit_killed: res.process_limit_killed,
      pids_events: events,
      live_after: liveAfter,
      loop: {
        process_limit_killed: loop.process_limit_killed,
        exit_code: loop.exit_code,
        timed_out: loop.timed_out,
        duration_ms: loop.duration_ms,
      },
      loop_live_after: await liveProcs(hostUid),
    };
  });

  await section('timeout', async () => {
    // "armed" on stdout proves the trap was set before the timeout's SIGTERM came;
    // the timeout leaves twice what starting an exec took here (TCG speed varies with host load).
    const spinning = c.exec({
      capsule_id: 'lim',
      command: 'trap "" TERM; echo armed; while :; do :; done',
      timeout_ms: Math.max(1500, 2 * execMs),
    });
    // A CPU-bound exec runs at a sixteenth of the capsule's cpu.weight until it ends.
    const weights = new Set<string | null>();
    let ended = false;
    void spinning.finally(() => (ended = true));
    while (!ended) {
      weights.add(memDir ? read(join(memDir, 'cpu.weight')) : null);
      await new Promise((res) => setTimeout(res, 50));
    }
    const stubborn = await spinning;
    const bg = await c.exec({
      capsule_id: 'lim',
      command: '(sleep 300 &) ; setsid sleep 300 >/dev/null 2>&1 & echo started',
      timeout_ms: 20000,
    });
    return {
      stubborn: { timed_out: stubborn.timed_out, exit_code: stubborn.exit_code, stdout: stubborn.stdout },
      cpu_weights_while_spinning: [...weights],
      cpu_weight_after: memDir ? read(join(memDir, 'cpu.weight')) : null,
      background_stdout: bg.stdout,
      live_after: await liveProcs(hostUid),
    };
  });

  await section('lifecycle', async () => {
    const cap = await c.create({ capsule_id: 'life', memory_mb: 64 });
    const dir = findGroup('life');
    const ex = await c.exec({
      capsule_id: 'life',
      command: 'id -u; cat /data/input/data; echo out > /data/output/result.txt',
      input_b64: Buffer.from('in-bytes').toString('base64'),
      timeout_ms: 20000,
    });
    const files = await c.listOutput('life');
    const tmpfs = join(runner.stateDir, 'capsules', 'life');
    const populated = existsSync(join(tmpfs, 'output', 'result.txt'));
    const d = await c.destroy('life');
    return {
      group_path: dir,
      exec: { exit_code: ex.exit_code, stdout: ex.stdout, stderr: ex.stderr.slice(-500) },
      output_files: files.map((f) => f.filename),
      populated_before_destroy: populated,
      wipe: d.wipe,
      evidence_lifecycle: d.evidence[7],
      group_exists_after: dir ? existsSync(dir) : null,
      tmpfs_exists_after: existsSync(tmpfs),
      live_after: await liveProcs(cap.host_uid),
    };
  });

  await section('destroy', async () => {
    const d = await c.destroy('lim');
    return { evidence_lifecycle: d.evidence[7], group_exists_after: memDir ? existsSync(memDir) : null };
  });

  await section('recovery', async () => {
    await c.create({ capsule_id: 'crash', memory_mb: 64 });
    const dir = findGroup('crash');
    if (!dir) throw new Error('no cgroup directory named crash');
    // A process a crashed runner left behind in the capsule's group.
    const leftover = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
    leftover.unref();
    writeFileSync(join(dir, 'cgroup.procs'), String(leftover.pid));
    const procsBefore = read(join(dir, 'cgroup.procs'));
    await runner.kill();
    // The runner's spawner helper dies with it (parent-death signal); its exit may lag the runner's by a few ms.
    const leafProcs = join(dirname(dir), RUNNER_LEAF, 'cgroup.procs');
    for (let i = 0; i < 200 && (read(leafProcs) ?? '').trim() !== ''; i++) await new Promise((r) => setTimeout(r, 10));
    // What a restarted runner does with its cgroups (open from inside the leaf, list, kill, remove),
    // called directly: a second runner start costs 20-30 s under TCG, and the rest of recovery is
    // the same on v1 and v2 (test/runner/recovery.test.ts).
    const subtree = dirname(dir);
    const cg = CgroupManager.open(basename(subtree));
    const paths = cg.pathsFor('crash');
    const result = {
      group_path: dir,
      leftover_pid: leftover.pid,
      procs_before_crash: procsBefore,
      reopened_path: paths.memory,
      listed: cg.listGroups(),
      emptied: await killGroup(paths),
      removed: await removeGroup(paths),
      leftover_alive_after:
        existsSync(`/proc/${leftover.pid}`) && !/^\S+ \S+ Z/.test(read(`/proc/${leftover.pid}/stat`) ?? ''),
      group_exists_after: existsSync(dir),
      opener_cgroup: cgroupOf('self'),
      subtree_exists_after_stop: null as boolean | null,
    };
    cg.removeSubtree();
    result.subtree_exists_after_stop = existsSync(subtree);
    return result;
  });
  report['tree_after'] = read(join(SERVICE_CGROUP, 'cgroup.procs'));
}

main()
  .catch((e: unknown) => {
    report['fatal'] = e instanceof Error ? `${e.message}\n${e.stack ?? ''}` : String(e);
  })
  .finally(() => {
    report['finished_uptime_s'] = uptime();
    writeFileSync(out, JSON.stringify(report, null, 2));
    process.exit(0);
  });
