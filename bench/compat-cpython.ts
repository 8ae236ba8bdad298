// Compatibility of the seccomp allowlist, measured the way gVisor measures
// its own: CPython's regression modules that concern the OS (Debian's
// libpython3.11-testsuite) run with CPython's own test runner
// (`python3 -m test <module>`), once on the host as an unprivileged uid and
// once inside a real capsule, and the pass counts are compared.
//   npm run build && npm run compat:cpython             (as root)
//   COMPAT_MODULES="test_os test_posix" npm run compat:cpython
//   COMPAT_POLICY=/path/to/other.yaml npm run compat:cpython   (another allowlist)
// A module passes when the runner exits 0; a failing module is run once more
// on the same side before it counts as failed (the machine is shared and
// timing-sensitive tests flake under load). The capsule gets generous
// memory, tmpfs and pids bounds so what is measured is the syscall filter.
import { spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRunner } from '../test/helpers/runner.js';

const PY = '/usr/bin/python3';
const TESTS = '/usr/lib/python3.11/test';

/** OS-facing modules: processes, signals, files, sockets, event loops, terminals, time, resources. */
export const OS_MODULES = [
  'test_os',
  'test_posix',
  'test_posixpath',
  'test_genericpath',
  'test_stat',
  'test_shutil',
  'test_tempfile',
  'test_pathlib',
  'test_glob',
  'test_fileio',
  'test_file',
  'test_io',
  'test_largefile',
  'test_mmap',
  'test_fcntl',
  'test_ioctl',
  'test_tarfile',
  'test_subprocess',
  'test_signal',
  'test_threadsignals',
  'test_eintr',
  'test_wait3',
  'test_wait4',
  'test_fork1',
  'test_thread',
  'test_threading',
  'test_concurrent_futures',
  'test_faulthandler',
  'test_resource',
  'test_time',
  'test_sched',
  'test_select',
  'test_selectors',
  'test_poll',
  'test_epoll',
  'test_socket',
  'test_socketserver',
  'test_ssl',
  'test_timeout',
  'test_asyncio',
  'test_httpservers',
  'test_urllib2_localnet',
  'test_pty',
  'test_openpty',
  'test_getpass',
  'test_pwd',
  'test_grp',
  'test_platform',
  'test_uuid',
  'test_tracemalloc',
  'test_logging',
];

interface Outcome {
  pass: boolean;
  code: number;
  tail: string;
  seconds: number;
}

const TIMEOUT_MS = Number(process.env['COMPAT_TIMEOUT_MS'] ?? 15 * 60 * 1000);

function hostRun(module: string, uid: number): Promise<Outcome> {
  const dir = mkdtempSync(join(tmpdir(), 'compat-host-'));
  chownSync(dir, uid, uid);
  const started = Date.now();
  return new Promise((resolve) => {
    const p = spawn(
      'setpriv',
      [
        `--reuid=${uid}`,
        `--regid=${uid}`,
        '--clear-groups',
        'env',
        '-i',
        `HOME=${dir}`,
        `TMPDIR=${dir}`,
        'PATH=/usr/local/bin:/usr/bin:/bin',
        'LANG=C.UTF-8',
        PY,
        '-m',
        'test',
        module,
      ],
      { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true },
    );
    let out = '';
    const keep = (b: Buffer): void => {
      out = (out + b.toString()).slice(-4000);
    };
    p.stdout.on('data', keep);
    p.stderr.on('data', keep);
    const timer = setTimeout(() => {
      try {
        process.kill(-p.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, TIMEOUT_MS);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      const c = code ?? (signal ? 128 : -1);
      resolve({ pass: c === 0, code: c, tail: out, seconds: (Date.now() - started) / 1000 });
    });
  });
}

async function main(): Promise<void> {
  if (!existsSync(join(TESTS, 'test_os.py'))) {
    console.error(`compat: ${TESTS} is missing; install Debian's libpython3.11-testsuite`);
    process.exit(2);
  }
  const modules = (process.env['COMPAT_MODULES'] ?? OS_MODULES.join(' ')).split(/\s+/).filter(Boolean);
  const policy = process.env['COMPAT_POLICY'];
  const r = await startRunner({
    options: {
      tmpfs_mb: '2048',
      pids_max: '1024',
      ...(policy ? { seccomp_policy: policy } : {}),
    },
  });
  // The host side runs as nobody: an unprivileged uid with a passwd entry
  // (tests look up their own user), in a fresh directory of its own.
  const hostUid = 65534;
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.once(sig, () => {
      void r.stop().finally(() => process.exit(130));
    });
  const capsuleRun = async (module: string): Promise<Outcome> => {
    const id = `compat-${module.replace(/_/g, '-')}-${Date.now() % 100000}`;
    await r.client.create({ capsule_id: id, memory_mb: 2048 });
    const started = Date.now();
    try {
      const res = await r.client.exec({
        capsule_id: id,
        command: `cd /tmp && ${PY} -m test ${module} > /tmp/regrtest.log 2>&1; rc=$?; tail -c 4000 /tmp/regrtest.log; exit $rc`,
        timeout_ms: TIMEOUT_MS,
      });
      return {
        pass: res.exit_code === 0,
        code: res.timed_out ? 124 : res.exit_code,
        tail: res.stdout + res.stderr,
        seconds: (Date.now() - started) / 1000,
      };
    } finally {
      await r.client.destroy(id);
    }
  };
  const twice = async (run: () => Promise<Outcome>): Promise<Outcome> => {
    const first = await run();
    return first.pass ? first : run();
  };
  const rows: { module: string; host: Outcome; capsule: Outcome }[] = [];
  try {
    for (const m of modules) {
      // Host and capsule side by side: the same load on both.
      const [host, capsule] = await Promise.all([twice(() => hostRun(m, hostUid)), twice(() => capsuleRun(m))]);
      rows.push({ module: m, host, capsule });
      console.log(
        `${m.padEnd(26)} host ${host.pass ? 'pass' : `FAIL(${host.code})`.padEnd(4)} ${host.seconds.toFixed(0).padStart(4)} s   capsule ${capsule.pass ? 'pass' : `FAIL(${capsule.code})`} ${capsule.seconds.toFixed(0).padStart(4)} s`,
      );
      if (host.pass && !capsule.pass) console.log(indent(capsule.tail.split('\n').slice(-25).join('\n')));
    }
  } finally {
    await r.stop();
  }
  const hostPass = rows.filter((x) => x.host.pass);
  const both = hostPass.filter((x) => x.capsule.pass);
  const pct = hostPass.length ? (100 * both.length) / hostPass.length : 0;
  console.log(
    `\n${both.length} of ${hostPass.length} host-passing OS modules pass inside a capsule (${pct.toFixed(1)} %); ` +
      `${rows.length} modules run, ${rows.length - hostPass.length} fail on the host too`,
  );
  const lost = hostPass.filter((x) => !x.capsule.pass).map((x) => x.module);
  if (lost.length) console.log(`failing only inside: ${lost.join(' ')}`);
  const hostOnly = rows.filter((x) => !x.host.pass).map((x) => x.module);
  if (hostOnly.length) console.log(`failing on the host (not counted): ${hostOnly.join(' ')}`);
}

function indent(s: string): string {
  return s
    .split('\n')
    .map((l) => `    | ${l}`)
    .join('\n');
}

await main();
