// The runner's cgroup v2 path (isolation layer 5 on production hosts), run in
// a small qemu guest with a pure cgroup v2 hierarchy because this machine is
// hybrid. One boot: the guest driver (cgroup-v2-guest.ts) plays `capsule
// serve` in a systemd-like service cgroup, spawns the real runner and writes a
// JSON report of what it measured to the shared directory; this file asserts it.
// A guest that does not boot fails the test; only a missing qemu skips it.
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../../../', import.meta.url)).replace(/\/$/, '');
const GUEST = join(REPO, 'scripts', 'cgroup-v2-guest.mjs');
const DRIVER = join(REPO, 'dist', 'test', 'runner', 'cgroup-v2-guest.js');

type Section = Record<string, any>;

async function boot(share: string): Promise<{ code: number | null; console: string; ms: number }> {
  // The kernel command line splits on spaces: the command travels as a script in the share.
  writeFileSync(
    join(share, 'run.sh'),
    `cd '${REPO}' && exec ./node_modules/.bin/node '${DRIVER}' /share/report.json\n`,
    { mode: 0o755 },
  );
  const t0 = Date.now();
  const child = spawn(process.execPath, [GUEST, 'run', '--share', share, '--ro', REPO, '--timeout-s', '300'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString('latin1')));
  child.stderr.on('data', (b: Buffer) => (out += b.toString('latin1')));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, console: out, ms: Date.now() - t0 };
}

if (spawnSync('sh', ['-c', 'command -v qemu-system-x86_64']).status !== 0) {
  t.plan(0, 'qemu-system-x86_64 not installed (Debian qemu-system-x86, installed by ./run): cgroup v2 guest not run');
} else {
  t.test('runner on cgroup v2, in a qemu guest', async (t) => {
    const share = mkdtempSync(join(tmpdir(), 'capsule-cgv2-'));
    t.teardown(() => rmSync(share, { recursive: true, force: true }));
    const run = await boot(share);
    t.comment(`cgroup v2 guest: boot + checks ${(run.ms / 1000).toFixed(1)} s wall`);
    const tail = run.console.split('\n').slice(-40).join('\n');
    t.equal(run.code, 0, 'the guest booted and ran the driver to the end', { console: tail });
    const reportFile = join(share, 'report.json');
    if (!existsSync(reportFile)) {
      t.fail('the guest wrote no report', { console: tail });
      return;
    }
    const report = JSON.parse(readFileSync(reportFile, 'utf8')) as Record<string, Section>;
    t.notOk(report['fatal'], 'the driver did not crash', { fatal: report['fatal'] });
    const s = (name: string): Section => {
      const v = report[name] ?? { error: 'section missing' };
      t.notOk(v['error'], `${name}: ran without error`, { error: v['error'] });
      return v;
    };
    const ms = Object.entries(report)
      .filter(([, v]) => typeof v === 'object' && v !== null && 'ms' in v)
      .map(([k, v]) => `${k} ${(Number(v['ms']) / 1000).toFixed(1)}`);
    t.comment(
      `guest uptime at driver start ${String(report['started_uptime_s'])} s, at end ${String(report['finished_uptime_s'])} s; sections (s): ${ms.join(', ')}`,
    );

    const env = s('environment');
    t.same(env['cgroup_fstypes'], ['cgroup2'], 'the guest has a pure cgroup v2 hierarchy (no v1 mount)');
    t.match(env['root_controllers'], /\bmemory\b.*\bpids\b/);
    t.equal(String(env['swaps']).trim().split('\n').length, 1, 'no swap in the guest');

    const start = s('start');
    t.equal(start['host']?.['cgroup_mode'], 'v2', 'the runner reports cgroup v2');
    t.equal(start['host']?.['swap_active'], false);
    // It shared its cgroup with its parent: both moved into the supervisor leaf so the service cgroup can
    // delegate; then the runner moved on into its own bounded leaf of its subtree (runner_memory_mb).
    t.match(start['runner_cgroup'], /^0::\/system\.slice\/capsule\.service\/capsule-test-[0-9a-f]+\/\.runner$/);
    t.equal(start['driver_cgroup'], '0::/system.slice/capsule.service/capsule-supervisor');

    const lim = s('limits');
    t.match(lim['path'], /^\/sys\/fs\/cgroup\/system\.slice\/capsule\.service\/capsule-test-[0-9a-f]+\/lim$/);
    t.equal(lim['memory_max'], String(64 * 1024 * 1024), 'memory.max = memory_mb');
    t.equal(lim['memory_swap_max'], '0', 'memory.swap.max = 0');
    t.equal(lim['memory_oom_group'], '1', 'memory.oom.group = 1');
    t.equal(lim['pids_max'], '64', 'pids.max = pids_max');
    t.equal(lim['cpu_weight'], '50', 'cpu.weight = cpu_weight');
    t.equal(lim['exec_true']?.['exit_code'], 0, 'an exec runs in the v2 group');

    const oom = s('oom');
    t.equal(oom['exit_code'], 137, 'the memory hog is killed (137)');
    t.equal(oom['oom_killed'], true, 'the runner reports oom_killed');
    t.equal(oom['timed_out'], false);
    t.ok(oom['memory_events']?.['oom_group_kill'] >= 1, 'the kernel killed the whole group (oom_group_kill)', {
      events: oom['memory_events'],
    });
    // The runner's own OOM sweep (v1's way) may race the kernel to the sleepers beside the hog,
    // so who killed them is not asserted; that the kernel group-killed this group and none survived is.
    const group = String(lim['path']).replace('/sys/fs/cgroup', '');
    t.ok(
      (oom['kernel_log'] as string[]).some((l) =>
        l.includes(`Tasks in ${group} are going to be killed due to memory.oom.group set`),
      ),
      'the kernel logged the group kill of this capsule group',
      { log: oom['kernel_log'] },
    );
    t.equal(oom['memory_swap_current'], '0', 'nothing of the capsule went to swap');
    t.same(oom['live_after'], [], 'no process of the capsule survives');
    t.equal(oom['next_stdout'], 'fine\n', 'the capsule is usable after the OOM kill');
    t.equal(oom['next_oom_killed'], false, 'the next exec is not marked OOM');

    const pids = s('pids');
    const m = /stopped (\d+) 11/.exec(pids['stdout'] ?? '');
    t.ok(m, `the fork loop got EAGAIN: ${pids['stdout']} ${pids['stderr']}`);
    t.ok(m && Number(m[1]) < 64, `it stopped below pids.max (${m?.[1]})`);
    t.ok(pids['pids_events']?.['max'] >= 1, 'pids.events counts the refusals', { events: pids['pids_events'] });
    t.same(pids['live_after'], []);
    t.equal(pids['process_limit_killed'], false, 'a program that met the bound once ran on');
    t.equal(pids['loop']?.['process_limit_killed'], true, 'a loop forking at the bound was stopped', pids['loop']);
    t.equal(pids['loop']?.['exit_code'], 137);
    t.equal(pids['loop']?.['timed_out'], false, 'well before its timeout');
    t.same(pids['loop_live_after'], [], 'nothing of the stopped loop survives');

    const to = s('timeout');
    t.equal(to['stubborn']?.['stdout'], 'armed\n', 'the TERM-ignoring workload was running when the timeout hit');
    t.equal(to['stubborn']?.['timed_out'], true);
    t.equal(to['stubborn']?.['exit_code'], 137, 'SIGKILLed (cgroup.kill) after the grace');
    t.ok(to['cpu_weights_while_spinning']?.includes('3'), 'the spinning exec ran at 50 / 16', to);
    t.equal(to['cpu_weight_after'], '50', 'its weight is back once it ended');
    t.equal(to['background_stdout'], 'started\n');
    t.same(to['live_after'], [], 'background and setsid processes did not outlive the exec');

    const life = s('lifecycle');
    t.equal(life['exec']?.['exit_code'], 0, life['exec']?.['stderr']);
    t.equal(life['exec']?.['stdout'], '1000\nin-bytes');
    t.same(life['output_files'], ['result.txt']);
    t.equal(life['populated_before_destroy'], true);
    t.equal(life['wipe']?.['readback_verified'], true, 'the wipe read back its last pattern');
    t.same(life['wipe']?.['passes'], ['zeros', 'ones', 'random', 'zeros']);
    t.ok(life['wipe']?.['bytes_overwritten'] >= 'in-bytes'.length + 'out\n'.length);
    const ev = life['evidence_lifecycle'] ?? {};
    t.equal(ev['cgroup_mode'], 'v2');
    t.equal(ev['cgroup_empty'], true);
    t.equal(ev['cgroup_removed'], true, 'destroy removed the v2 group');
    t.equal(ev['tmpfs_unmounted'], true);
    t.equal(ev['uid_released'], true);
    t.equal(life['group_exists_after'], false, 'the group directory is gone');
    t.equal(life['tmpfs_exists_after'], false);
    t.same(life['live_after'], []);

    const d = s('destroy');
    t.equal(d['evidence_lifecycle']?.['cgroup_removed'], true, 'the OOM-killed capsule is removed too');
    t.equal(d['group_exists_after'], false);

    const rec = s('recovery');
    t.match(rec['procs_before_crash'], String(rec['leftover_pid']), 'a process sat in the group at the crash');
    t.equal(
      rec['opener_cgroup'],
      '0::/system.slice/capsule.service/capsule-supervisor',
      'reopened from inside the supervisor leaf',
    );
    t.equal(rec['reopened_path'], rec['group_path'], 'a restarted runner finds the same subtree');
    t.same(rec['listed'], ['crash'], 'and lists the crashed capsule group');
    t.equal(rec['emptied'], true, 'killGroup emptied it (cgroup.kill)');
    t.equal(rec['leftover_alive_after'], false, 'the leftover process is dead');
    t.equal(rec['removed'], true);
    t.equal(rec['group_exists_after'], false, 'the group is removed');
    t.equal(rec['subtree_exists_after_stop'], false, 'removeSubtree removes the emptied runner subtree');
  });
}
