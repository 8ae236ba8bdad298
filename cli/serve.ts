// `capsule serve [--port N] [--data-dir DIR] [--runner-socket PATH]`
// Starts the control plane. Unless pointed at a separately started runner
// (--runner-socket or CAPSULE_RUNNER_SOCKET, or a network runner over mutual TLS with CAPSULE_RUNNERS), it spawns a local runner child
// (dist/sandbox-runner/main.js) whose socket and state live under
// /run/capsule-runner/<hash of the data dir>, so that this one command is a working single-node install.
// That runner dies with serve (parent-death signal and a parent-pid watch); if it dies on its own,
// serve keeps answering (ready 503) and restarts it with backoff, then reconciles its capsules.
// Secrets (DATABASE_URL) come only from the environment or *_FILE files;
// nothing is generated: proofs are signed with per-proof ephemeral keys.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RunnerClient } from '../shared/node/runner-client.js';
import { activeSwaps, PROC_SWAPS, swapRefusal } from '../shared/node/swaps.js';
import {
  ConfigError,
  loadConfigFromProcess,
  ReconnectingRunner,
  startControlPlane,
  type ConfigOverrides,
} from '../control-plane/index.js';

const USAGE = 'usage: capsule serve [--port N] [--data-dir DIR] [--runner-socket PATH]\n';
/** Restart backoff of the local runner: 0.5 s doubling to 30 s; reset once a runner stayed up a minute. */
const RUNNER_BACKOFF_BASE_MS = 500;
const RUNNER_BACKOFF_MAX_MS = 30_000;
const RUNNER_STABLE_MS = 60_000;
const RUNNER_MAIN = fileURLToPath(new URL('../sandbox-runner/main.js', import.meta.url));

function parseArgs(argv: string[]): ConfigOverrides | string {
  const over: ConfigOverrides = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    const [flag, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = (): string | undefined => inline ?? argv[++i];
    if (flag === '--port') {
      const v = Number(value());
      if (!Number.isInteger(v) || v < 0 || v > 65535) return '--port: expected a port number';
      over.port = v;
    } else if (flag === '--data-dir') {
      const v = value();
      if (!v) return '--data-dir: expected a directory';
      over.dataDir = v;
    } else if (flag === '--runner-socket') {
      const v = value();
      if (!v) return '--runner-socket: expected a socket path';
      over.runnerSocket = v;
    } else if (flag === '-h' || flag === '--help') {
      return 'help';
    } else {
      return `unknown option ${JSON.stringify(a)}`;
    }
  }
  return over;
}

/** Stops a runner left behind by a previous serve that was killed (its pid file names it). */
async function stopStaleRunner(pidFile: string): Promise<void> {
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  rmSync(pidFile, { force: true });
  if (!Number.isInteger(pid) || pid <= 1) return;
  let cmd = '';
  try {
    cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return;
  }
  if (!cmd.includes(RUNNER_MAIN)) return; // pid reused by something else: not ours
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 100 && existsSync(`/proc/${pid}`); i++) await new Promise((r) => setTimeout(r, 100));
  if (existsSync(`/proc/${pid}`)) process.kill(pid, 'SIGKILL');
}

/**
 * The local runner's socket and state live in /run (volatile, like the
 * capsules; survives a serve restart, not a reboot), one directory per data
 * dir. WARNING: capsule uids must traverse every ancestor of the state dir to
 * bind their tmpfs, which a private (0700) data dir would forbid.
 */
function runnerDir(dataDir: string): string {
  const dir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  chmodSync('/run/capsule-runner', 0o711);
  chmodSync(dir, 0o711);
  return dir;
}

async function spawnRunner(dataDir: string, procSwaps: string): Promise<{ child: ChildProcess; socket: string }> {
  const dir = runnerDir(dataDir);
  const pidFile = join(dir, 'runner.pid');
  await stopStaleRunner(pidFile);
  const socket = join(dir, 'runner.sock');
  // setpriv --pdeathsig: the runner gets SIGTERM if this process dies, even by SIGKILL.
  const child = spawn(
    'setpriv',
    [
      '--pdeathsig',
      'TERM',
      process.execPath,
      RUNNER_MAIN,
      `--socket=${socket}`,
      `--state_dir=${join(dir, 'state')}`,
      `--proc_swaps=${procSwaps}`,
      // A parent-pid watch besides the parent-death signal: the runner never outlives this process.
      '--exit_with_parent=1',
    ],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  writeFileSync(pidFile, String(child.pid ?? ''), { mode: 0o600 });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL'); // never leave a runner that is not ready behind
      reject(new Error('runner did not report ready within 30 s'));
    }, 30_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`runner exited with code ${code} before it was ready`));
    });
    child.stdout?.on('data', (b: Buffer) => {
      out += b.toString('utf8');
      if (/^ready /m.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return { child, socket };
}

export async function main(argv: string[]): Promise<number> {
  const over = parseArgs(argv);
  if (over === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (typeof over === 'string') {
    process.stderr.write(`capsule serve: ${over}\n${USAGE}`);
    return 2;
  }
  let config;
  try {
    config = loadConfigFromProcess(over);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`capsule serve: bad configuration: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  // SPEC §11: no start on a node with active swap (the runner checks again for its own node).
  let swaps: string[];
  try {
    swaps = activeSwaps(config.procSwaps);
  } catch (e) {
    process.stderr.write(`capsule serve: cannot read the swap table ${config.procSwaps}: ${(e as Error).message}\n`);
    return 2;
  }
  if (swaps.length > 0) {
    process.stderr.write(`capsule serve: ${swapRefusal(swaps)}\n`);
    return 2;
  }
  if (config.procSwaps !== PROC_SWAPS)
    process.stderr.write(
      `capsule serve: WARNING swap is read from ${config.procSwaps} (CAPSULE_PROC_SWAPS, tests only)\n`,
    );
  let child: ChildProcess | null = null;
  let socket = config.runnerSocket;
  const remote = config.remoteRunners !== null && socket === null;
  const local = !socket && !remote;
  if (local) ({ child, socket } = await spawnRunner(config.dataDir, config.procSwaps));
  // Network runners (CAPSULE_RUNNERS) are reached, placed on and heartbeated by the control plane itself.
  const runner = remote ? null : new ReconnectingRunner(() => new RunnerClient(socket!));
  const cp = await startControlPlane(config, runner);
  runner?.onReconnect(() => cp.services.recovery.reset());
  process.stdout.write(
    `capsule: control plane listening on ${cp.url} (database: ${config.database.driver}, data dir: ${config.dataDir})\n`,
  );
  return new Promise<number>((resolve) => {
    let stopping = false;
    let restartTimer: NodeJS.Timeout | null = null;
    /** Restarts in a row that did not stay up for RUNNER_STABLE_MS: the backoff exponent. */
    let failures = 0;
    let startedAt = Date.now();
    const stop = async (): Promise<void> => {
      if (stopping) return;
      stopping = true;
      if (restartTimer) clearTimeout(restartTimer);
      await cp.close().catch(() => undefined);
      await runner?.close().catch(() => undefined);
      const c = child;
      if (c && c.exitCode === null && c.signalCode === null) {
        c.kill('SIGTERM');
        await new Promise((r) => {
          c.once('exit', r);
          setTimeout(r, 15_000).unref();
        });
      }
      resolve(0);
    };
    // The local runner died: the control plane keeps serving (ready 503, capsule calls 503) while
    // it is restarted with backoff; the new runner recovers the capsules, and reconciliation marks
    // them expired_unclean with partial proofs, as after a restart of the whole server.
    const scheduleRestart = (why: string): void => {
      if (Date.now() - startedAt >= RUNNER_STABLE_MS) failures = 0;
      const delay = Math.min(RUNNER_BACKOFF_MAX_MS, RUNNER_BACKOFF_BASE_MS * 2 ** failures);
      failures++;
      process.stderr.write(`capsule serve: the local runner ${why}; restarting it in ${delay} ms\n`);
      restartTimer = setTimeout(() => void restart(), delay);
    };
    const watch = (c: ChildProcess): void => {
      c.once('exit', (code, signal) => {
        if (stopping || c !== child) return;
        child = null;
        runner?.reconnect();
        scheduleRestart(`exited (${signal ?? `code ${code}`})`);
      });
    };
    const restart = async (): Promise<void> => {
      restartTimer = null;
      if (stopping) return;
      startedAt = Date.now();
      try {
        const r = await spawnRunner(config.dataDir, config.procSwaps);
        if (stopping) {
          r.child.kill('SIGTERM');
          return;
        }
        child = r.child;
        watch(r.child);
        runner?.reconnect();
        cp.services.recovery.reset();
        const report = await cp.services.recovery.ensure().catch(() => null);
        process.stderr.write(
          `capsule serve: the local runner is back${report ? ` (${report.expired_unclean.length} capsules expired_unclean)` : ''}\n`,
        );
      } catch (e) {
        if (!stopping) scheduleRestart(`did not start (${(e as Error).message})`);
      }
    };
    process.once('SIGINT', () => void stop());
    process.once('SIGTERM', () => void stop());
    if (local && child) watch(child);
  });
}
