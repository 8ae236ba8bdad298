// Sandbox runner process entry. Reads its configuration once, refuses to
// start without root, bubblewrap or with swap on, recovers capsules left by
// a crash, then serves the runner protocol on a 0600 Unix socket.
// Prints "ready <socket>" on stdout once it accepts connections.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { activeSwaps, PROC_SWAPS, swapRefusal } from '../shared/node/swaps.js';
import { RUNNER_PROTOCOL_VERSION } from '../shared/runner-protocol.js';
import { CgroupError, CgroupManager } from './cgroup.js';
import { favorDynmods } from './cgroup-dynmods.js';
import { CapsuleManager, etcDirFor } from './capsule.js';
import { systemClock, systemRandom } from './clock.js';
import { ConfigError, loadConfig, type RunnerConfig } from './config.js';
import { closeInheritedFds } from './fds.js';
import { bwrapVersion, hostFacts, nsInodes, swapActive } from './host.js';
import { recoverCapsules } from './recovery.js';
import { compilePolicy, loadPolicy, PolicyError } from './seccomp.js';
import { prepareEtc, procMaskArgs } from './sandbox.js';
import { startServer, startTlsServer } from './server.js';
import { spawner } from './spawner.js';
import type { AddressInfo } from 'node:net';
import { isMountPoint, Mounter } from './tmpfs.js';
import { PrivateCopies } from './private-copies.js';
import { UidPool } from './uids.js';

// libuv sizes its thread pool from UV_THREADPOOL_SIZE when the pool first starts. The runner's
// asynchronous file calls go there from every thread (the exec thread's cgroup joins, mount table
// reads, egress teardown's /proc scan, state removal), and under a fork storm a write to a
// cgroup.procs file blocks inside the kernel for a long time: with libuv's default of 4 threads a
// light tenant's destroy waited up to 470 ms behind them in the soak (77 ms with 16). An operator's
// own setting wins. WARNING: this must run before any file system work is queued, so no module
// imported above may start any when it loads (test/runner/startup.test.ts counts the threads).
process.env.UV_THREADPOOL_SIZE ??= '16';

/**
 * Size of the tmpfs holding the prepared /etc trees, the /proc mask sources and each tenant's
 * private copies (private-copies.ts: about 2.3 MB per tenant with capsules on the node). Its pages
 * are charged to the runner, so it takes at most a quarter of runner_memory_mb: a cap, not a
 * reservation. Once full, a new tenant's capsules map the image's shared files.
 */
const etcTmpfsMb = (runnerMemoryMb: number): number => Math.max(32, Math.floor(runnerMemoryMb / 4));
const ETC_INODES = 16384;

/** Exit 2: the node is unfit (swap on); 1: anything else. */
function fail(msg: string, code: 1 | 2 = 1): never {
  process.stderr.write(`capsule-runner: ${msg}\n`);
  process.exit(code);
}

/** Graceful stop gets this long (destroying every capsule); then the runner exits anyway and recovery covers the rest. */
const STOP_DEADLINE_MS = 30_000;

/** The parent pid as the kernel says now (process.ppid is read once at start). */
function currentPpid(): number | null {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

async function main(): Promise<void> {
  closeInheritedFds();
  // WARNING: when the parent dies, its ends of our stdout/stderr pipes close and
  // the next write fails with EPIPE; unhandled, that error would kill the runner
  // in the middle of the stop that unmounts every capsule. The lines are lost, the stop goes on.
  for (const s of [process.stdout, process.stderr]) s.on('error', () => undefined);
  // SIGTERM/SIGINT are obeyed from the first moment: during start-up they are
  // remembered and acted on once the state is consistent (after recovery).
  let stop: (() => void) | null = null;
  let stopRequested = false;
  const onSignal = (): void => {
    stopRequested = true;
    stop?.();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const startPpid = currentPpid();
  let config: RunnerConfig;
  try {
    config = loadConfig(process.env, process.argv.slice(2));
  } catch (e) {
    if (e instanceof ConfigError) fail(`bad configuration: ${e.message}`);
    throw e;
  }
  if (typeof process.getuid !== 'function' || process.getuid() !== 0)
    fail('must run as root (it creates tmpfs mounts, cgroups and per-capsule uids)');
  const bwrap = bwrapVersion();
  if (!bwrap) fail('bubblewrap (bwrap) not found on PATH; install the Debian package "bubblewrap"');
  let swaps: string[];
  try {
    swaps = activeSwaps(config.procSwaps);
  } catch (e) {
    fail(`cannot read the swap table ${config.procSwaps}: ${(e as Error).message}`);
  }
  if (swaps.length > 0) {
    if (!config.allowSwapForTests) fail(swapRefusal(swaps), 2);
    process.stderr.write(
      `capsule-runner: WARNING swap is active (${swaps.join(', ')}); allowed by allow_swap_for_tests, reported in host facts\n`,
    );
  }
  if (config.procSwaps !== PROC_SWAPS)
    process.stderr.write(`capsule-runner: WARNING swap is read from ${config.procSwaps} (proc_swaps, tests only)\n`);
  if (config.cgroupFavorDynmods) {
    const d = favorDynmods();
    if (d.state === 'failed')
      process.stderr.write(
        `capsule-runner: WARNING cgroup2 favordynmods not set on ${d.mountPoint} (${d.reason}); every exec waits for its cgroup moves\n`,
      );
  }
  let cgroups: CgroupManager;
  let unconfine: () => void;
  try {
    const b = config.bounds;
    cgroups = CgroupManager.open(config.cgroupName, b.capsulesCpuWeight, b.quickCpuWeight, b.servicesCpuWeight);
    // The runner's own memory is bounded, and the runner plus its capsules together (see confineRunner);
    // on v1 the runner and the `capsule serve` supervising it share the services' CPU group.
    unconfine = cgroups.confineRunner(
      config.runnerMemoryMb * 1024 * 1024,
      (config.nodeMemoryMb + config.runnerMemoryMb) * 1024 * 1024,
      config.exitWithParent ? startPpid : null,
    );
  } catch (e) {
    fail(`cgroups: ${e instanceof CgroupError ? e.message : (e as Error).message}`);
  }
  const mounter = Mounter.start();
  let seccompPath: string;
  let procMask: string[];
  let copies: PrivateCopies;
  const etcRoot = join(config.stateDir, 'etc');
  try {
    mkdirSync(config.stateDir, { recursive: true, mode: 0o711 });
    // Capsule uids must traverse (not list) the path to their tmpfs to bind it.
    chmodSync(config.stateDir, 0o711);
    seccompPath = join(config.stateDir, 'seccomp.bpf');
    writeFileSync(seccompPath, compilePolicy(loadPolicy(config.seccompPolicyPath)), { mode: 0o600 });
    for (const [label, root] of Object.entries(config.runtimes)) {
      if (!existsSync(join(root, 'usr'))) fail(`runtime ${label}: image root ${root} has no usr/`);
    }
    // The capsules' /etc and /proc masks live on a small tmpfs of their own, so a
    // capsule's mountinfo names them by their path in it ("/<hash>"), never by a host path.
    mkdirSync(etcRoot, { recursive: true, mode: 0o711 });
    // A runner that died left its tmpfs mounted: it is reused at this runner's size (it keeps its
    // old, larger size if it holds more than the new one allows).
    if (!(await isMountPoint(etcRoot))) await mounter.mount(etcRoot, etcTmpfsMb(config.runnerMemoryMb), ETC_INODES);
    else
      await mounter.remount(etcRoot, etcTmpfsMb(config.runnerMemoryMb), ETC_INODES).catch((e: Error) => {
        process.stderr.write(`capsule-runner: WARNING the /etc tmpfs keeps its size: ${e.message}\n`);
      });
    for (const root of new Set(Object.values(config.runtimes))) prepareEtc(root, etcDirFor(config.stateDir, root));
    procMask = procMaskArgs(join(etcRoot, '.mask'));
    copies = await PrivateCopies.open(join(etcRoot, '.own'), systemRandom);
    chmodSync(etcRoot, 0o711);
  } catch (e) {
    if (e instanceof PolicyError) fail(`seccomp policy ${config.seccompPolicyPath}: ${e.message}`);
    fail(`cannot prepare state dir ${config.stateDir}: ${(e as Error).message}`);
  }
  const lost = await recoverCapsules(config.stateDir, cgroups, mounter, systemClock, systemRandom);
  const facts = hostFacts(cgroups.mode, bwrap, config.procSwaps);
  const manager = new CapsuleManager({
    config,
    cgroups,
    uids: new UidPool(config.uidBase, config.uidCount),
    clock: systemClock,
    random: systemRandom,
    host: facts,
    hostNamespaces: nsInodes('self'),
    mounter,
    seccompPath,
    procMask,
    copies,
  });
  const serverDeps = {
    manager,
    maxBodyBytes: Math.max(config.bounds.maxUploadBytes, config.bounds.maxReadBytes),
    hello: () => ({
      protocol_version: RUNNER_PROTOCOL_VERSION,
      host: { ...facts, swap_active: swapActive(config.procSwaps) },
      capacity: manager.capacity(cgroups.runnerUsageBytes()),
      lost,
      node_id: config.nodeId,
      labels: config.labels,
    }),
  };
  const server = await startServer(config.socketPath, serverDeps);
  const l = config.listen;
  const tlsServer = l ? await startTlsServer(l.host, l.port, l, serverDeps) : null;
  if (tlsServer) {
    const a = tlsServer.address() as AddressInfo;
    process.stdout.write(`listening tls ${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}\n`);
  }
  let stopping = false;
  stop = (): void => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => {
      process.stderr.write(
        'capsule-runner: graceful stop took too long; exiting (the next start recovers what is left)\n',
      );
      process.exit(1);
    }, STOP_DEADLINE_MS).unref();
    server.close();
    tlsServer?.close();
    void (async () => {
      await manager.shutdown().catch(() => undefined);
      await mounter.unmount(etcRoot).catch(() => undefined);
      // The helpers live in the runner's groups: they must be gone before the groups can be removed
      // (this thread's spawner runs only if recovery or a fallback detach needed it).
      await mounter.close();
      await spawner.close();
      unconfine();
      cgroups.removeSubtree();
      process.exit(0);
    })();
  };
  // Spawned by `capsule serve`: die with it even if the parent-death signal was lost (a parent-pid watch).
  if (config.exitWithParent) {
    setInterval(() => {
      const now = currentPpid();
      if (now !== null && now !== startPpid) {
        process.stderr.write(`capsule-runner: parent ${startPpid} is gone; stopping\n`);
        stop?.();
      }
    }, 500).unref();
  }
  if (stopRequested) {
    stop();
    return;
  }
  process.stdout.write(`ready ${config.socketPath}\n`);
}

main().catch((e: unknown) => fail(`start failed: ${(e as Error).message}`));
