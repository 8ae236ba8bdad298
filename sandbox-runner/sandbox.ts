// Builds the command line of one capsule sandbox (isolation layers 1-4 and 6),
// started ahead of the exec that will use it:
//
//   /bin/sh -c 'read go; exec bwrap ...'  (the capsule's unprivileged host uid U, pre-started by the
//                                          runner with uid U and moved into the capsule cgroups by it)
//     bwrap --unshare-{user,ipc,pid,uts,net,cgroup-try} ... --seccomp 3 --info-fd 4
//       /bin/sh -c 'printf r >&5; read go <&5; . /capsule/exec/script'   (uid 1000 inside, no
//                                          capabilities, no_new_privs and seccomp set by bwrap)
//         exec /bin/sh -c <command>        (what the script ends with: cwd, env, then the command)
//
// With sealed egress the wrapper must enter the capsule's network namespace
// first, which takes root: it starts as root, joins the cgroups itself, and
//   exec nsenter --net=<netns> -- setpriv --reuid U --regid U --clear-groups ... bwrap ...
// (wrapperUid says which). The wrapper waits on fd 5 until it is in every
// cgroup (a move can cost an RCU grace period). Told "go", it becomes the
// sandbox, which sets itself up (namespaces, some 30 mounts: most of an
// exec's kernel time) and says so on fd 5; a capsule's first sandbox does
// all this before its exec arrives (see prepareExec). The exec writes its
// script (cwd, env, command: no argv on the host carries the env) into the
// capsule's exec directory, bound read-only inside, and says "go" again.
// fd 3 carries the compiled seccomp program, fd 4 receives bwrap's
// {"child-pid": N} so the runner can observe the capsule.
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { PrivateBind } from './private-copies.js';

export const INSIDE_UID = 1000;
export const INSIDE_GID = 1000;
export const SECCOMP_FD = 3;
export const INFO_FD = 4;
/**
 * The control socket. Two "go" lines arrive here: the pre-started wrapper reads the first (it is in
 * the capsule's cgroups: start the sandbox), the set-up sandbox the second (its exec's script is
 * written); dash's `read` takes one byte at a time from a socket, so neither reads the other's
 * line. The other way, the set-up sandbox writes "r" (ready) before it waits.
 */
export const GO_FD = 5;
/** The capsule's exec directory (on its tmpfs, root-owned) and where the sandbox sees it (read-only). */
export const EXEC_DIR = '.exec';
export const EXEC_DIR_INSIDE = '/capsule/exec';
const SCRIPT = 'script';

/**
 * What a set-up sandbox runs until its exec: builtins only until the script's exec; 125 (as
 * env(1)) when the runner went away meanwhile.
 */
export const SANDBOX_WAIT =
  `printf r >&${GO_FD}; read -r go <&${GO_FD} || exit 125; exec ${GO_FD}<&-; ` +
  `[ "$go" = go ] || exit 125; . ${EXEC_DIR_INSIDE}/${SCRIPT}`;

/** Where an exec's script is written on the host (the sandbox reads it at EXEC_DIR_INSIDE). */
export function scriptPath(tmpfsDir: string): string {
  return join(tmpfsDir, EXEC_DIR, SCRIPT);
}

/**
 * /etc entries a workload needs from the image (dynamic loader cache, TLS
 * roots, Debian alternatives links, time zone, NSS order, the public service
 * and protocol name tables getaddrinfo/getservbyname read). Nothing else of
 * the host /etc is visible.
 */
const ETC_SUBSET = [
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'alternatives',
  'ssl',
  'localtime',
  'nsswitch.conf',
  'services',
  'protocols',
];

/**
 * Builds the capsules' /etc for one image root once, at runner start: a copy
 * of ETC_SUBSET (symlinks kept verbatim; they point into the image's /usr)
 * plus generated passwd, group and hosts. One read-only bind per exec
 * instead of one per file keeps exec start-up short.
 */
export function prepareEtc(imageRoot: string, dest: string): void {
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true, mode: 0o755 });
  for (const e of ETC_SUBSET) {
    const src = join(imageRoot, 'etc', e);
    if (!existsSync(src) && !isSymlink(src)) continue;
    // Never copy private key material (e.g. /etc/ssl/private) into a capsule-visible tree.
    cpSync(src, join(dest, e), {
      recursive: true,
      verbatimSymlinks: true,
      preserveTimestamps: true,
      filter: (from) => !/\/private(\/|$)/.test(from),
    });
  }
  writeFileSync(
    join(dest, 'passwd'),
    `root:x:0:0:root:/nonexistent:/usr/sbin/nologin\ncapsule:x:${INSIDE_UID}:${INSIDE_GID}:capsule:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`,
    { mode: 0o644 },
  );
  writeFileSync(join(dest, 'group'), `root:x:0:\ncapsule:x:${INSIDE_GID}:\nnogroup:x:65534:\n`, { mode: 0o644 });
  // Mount point for an egress capsule's CA bundle (the /etc bind is read-only, so it must pre-exist).
  writeFileSync(join(dest, 'capsule-ca.pem'), '', { mode: 0o644 });
  writeFileSync(join(dest, 'hosts'), '127.0.0.1 localhost\n::1 localhost\n', { mode: 0o644 });
}

function isSymlink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/**
 * /proc entries hidden from a capsule, as container runtimes do (runc's
 * default masked paths) plus the host's identity: the VM init arguments, the
 * kernel build configuration, the physical memory and I/O port maps, and the
 * boot id. Files read as empty, directories as empty and read-only.
 */
export const MASKED_PROC_FILES = [
  '/proc/cmdline',
  '/proc/config.gz',
  '/proc/iomem',
  '/proc/ioports',
  '/proc/kcore',
  '/proc/keys',
  '/proc/key-users',
  '/proc/kallsyms',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/sysrq-trigger',
  '/proc/vmallocinfo',
  '/proc/sys/kernel/random/boot_id',
];
export const MASKED_PROC_DIRS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/scsi',
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/driver',
];

/** Where the runner keeps the empty file and directory it binds over masked /proc entries. */
export interface MaskSources {
  emptyFile: string;
  emptyDir: string;
}

/**
 * Prepares the mask sources under dir (which must be on the runner's own
 * small tmpfs, so that a capsule's mountinfo shows `/.mask/...` rather than
 * a host path) and returns the bwrap arguments for the entries this kernel
 * has. /proc/sys is bound read-only first: its contents follow the reader's
 * namespaces (hostname, net), so the host procfs' view is the capsule's own.
 */
export function procMaskArgs(dir: string): string[] {
  const m: MaskSources = { emptyFile: join(dir, 'file'), emptyDir: join(dir, 'dir') };
  mkdirSync(m.emptyDir, { recursive: true, mode: 0o555 });
  chmodSync(dir, 0o711);
  chmodSync(m.emptyDir, 0o555);
  writeFileSync(m.emptyFile, '', { mode: 0o444 });
  chmodSync(m.emptyFile, 0o444);
  const args: string[] = ['--ro-bind', '/proc/sys', '/proc/sys'];
  for (const f of MASKED_PROC_FILES) if (existsSync(f)) args.push('--ro-bind', m.emptyFile, f);
  for (const d of MASKED_PROC_DIRS) if (existsSync(d)) args.push('--ro-bind', m.emptyDir, d);
  return args;
}

/** What a capsule's sandboxes share: everything but the exec (a prepared sandbox fits any exec of its capsule). */
export interface SandboxSpec {
  /** Host directory of the capsule's tmpfs. */
  tmpfsDir: string;
  /** Read-only base image root ("/" = the host system prefix). */
  imageRoot: string;
  /** The /etc prepared for that image by prepareEtc. */
  etcDir: string;
  hostUid: number;
  hostname: string;
  hasApp: boolean;
  /** Egress: enter this network namespace instead of unsharing one (see egress.ts). */
  netnsPath?: string | null;
  /** Egress: CA bundle file bound read-only at /etc/capsule-ca.pem. */
  caFile?: string | null;
  /** bwrap arguments masking /proc entries (procMaskArgs, computed once at runner start). */
  procMask?: string[];
  /** The tenant's own copies of the loader, libc and shell, bound over the image's (private-copies.ts). */
  privateFiles?: readonly PrivateBind[];
}

/** bwrap mount arguments for the top-level entries of the image root (/usr, /bin, /lib...). */
function imageArgs(root: string): string[] {
  const args: string[] = ['--ro-bind', join(root, 'usr'), '/usr'];
  for (const top of ['bin', 'sbin', 'lib', 'lib64', 'lib32', 'libx32']) {
    const p = join(root, top);
    let st;
    try {
      st = lstatSync(p);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(p), `/${top}`);
    else if (st.isDirectory()) args.push('--ro-bind', p, `/${top}`);
  }
  return args;
}

const imageArgsCache = new Map<string, string[]>();

/** argv of the sandbox itself (what the wrapper execs). */
export function sandboxArgv(s: SandboxSpec): string[] {
  let img = imageArgsCache.get(s.imageRoot);
  if (!img) {
    img = imageArgs(s.imageRoot);
    imageArgsCache.set(s.imageRoot, img);
  }
  const bwrap = [
    'bwrap',
    '--unshare-user',
    '--unshare-ipc',
    '--unshare-pid',
    '--unshare-uts',
    '--unshare-cgroup-try',
    ...(s.netnsPath ? [] : ['--unshare-net']),
    '--disable-userns',
    '--uid',
    String(INSIDE_UID),
    '--gid',
    String(INSIDE_GID),
    '--hostname',
    s.hostname,
    '--die-with-parent',
    '--new-session',
    '--cap-drop',
    'ALL',
    ...img,
    ...(s.privateFiles ?? []).flatMap(([copy, target]) => ['--ro-bind', copy, target]),
    '--ro-bind',
    s.etcDir,
    '/etc',
    ...(s.caFile ? ['--ro-bind', s.caFile, '/etc/capsule-ca.pem'] : []),
    '--proc',
    '/proc',
    ...(s.procMask ?? []),
    '--dev',
    '/dev',
    '--bind',
    join(s.tmpfsDir, 'input'),
    '/data/input',
    '--bind',
    join(s.tmpfsDir, 'output'),
    '/data/output',
    '--bind',
    join(s.tmpfsDir, 'tmp'),
    '/tmp',
    ...(s.hasApp ? ['--ro-bind', join(s.tmpfsDir, 'app'), '/capsule/app'] : []),
    '--ro-bind',
    join(s.tmpfsDir, EXEC_DIR),
    EXEC_DIR_INSIDE,
    '--remount-ro',
    '/',
    '--chdir',
    '/data',
    '--clearenv',
    '--seccomp',
    String(SECCOMP_FD),
    '--info-fd',
    String(INFO_FD),
    '--',
    '/bin/sh',
    '-c',
    SANDBOX_WAIT,
  ];
  const setpriv = [
    'setpriv',
    `--reuid=${s.hostUid}`,
    `--regid=${s.hostUid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--nnp',
  ];
  // WARNING: without setpriv this argv must run as the capsule's uid: wrapperUid() and exec.ts keep the two in step.
  return wrapperUid(s) === null ? ['nsenter', `--net=${s.netnsPath}`, '--', ...setpriv, ...bwrap] : bwrap;
}

/**
 * The uid the exec's wrapper runs as: the capsule's own (the runner starts it so and moves it into
 * the cgroups; no setpriv, whose NSS lookup of a numeric uid cost about 1 ms per exec), or null for
 * root when sealed egress needs `nsenter` first.
 */
export function wrapperUid(s: Pick<SandboxSpec, 'hostUid' | 'netnsPath'>): number | null {
  return s.netnsPath || !UID_WRAPPER ? null : s.hostUid;
}

/** PATH of the processes the runner starts on the host (the wrapper finds bwrap, nsenter, setpriv here). */
export const HOST_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Whether a wrapper may start as the capsule's uid without setpriv, read once: the runner holds no
 * inheritable capabilities (setpriv cleared them; a uid change does not), and bwrap is not setuid
 * (setpriv's no_new_privs kept a setuid bwrap from elevating; bwrap sets it only once it runs).
 * Otherwise every exec takes the root wrapper and setpriv, as with sealed egress.
 */
const UID_WRAPPER = ((): boolean => {
  try {
    const inh = /^CapInh:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    if (inh === undefined || BigInt(`0x${inh}`) !== 0n) return false;
    for (const dir of HOST_PATH.split(':')) {
      const f = join(dir, 'bwrap');
      if (existsSync(f)) return (statSync(f).mode & 0o6000) === 0;
    }
    return false;
  } catch {
    return false;
  }
})();

/** Single-quotes one word for sh. */
function shq(w: string): string {
  return `'${w.replace(/'/g, `'\\''`)}'`;
}

/** One exec in a prepared sandbox: what its script sets up before the command. */
export interface ExecScript {
  command: string;
  env: Record<string, string>;
  /** Working directory inside (default /data, where the sandbox starts). */
  cwd?: string;
}

/**
 * The script a prepared sandbox sources for one exec (env names are shell
 * names: request-checks.ts refuses any other). It ends in the same
 * `/bin/sh -c <command>` a fresh sandbox ran, with the same environment.
 */
export function execScriptText(e: ExecScript): string {
  const lines: string[] = [];
  if (e.cwd !== undefined && e.cwd !== '/data') lines.push(`cd -- ${shq(e.cwd)} || exit 1`, 'unset OLDPWD');
  for (const [k, v] of Object.entries(e.env)) lines.push(`export ${k}=${shq(v)}`);
  lines.push(`exec /bin/sh -c ${shq(e.command)}`);
  return `${lines.join('\n')}\n`;
}

/**
 * The wrapper started ahead of an exec: joins every cgroup of the capsule
 * (children inherit it, so nothing escapes accounting), waits for "go", then
 * becomes the sandbox (argv).
 */
export function wrapperArgv(cgroupProcsFiles: string[], argv: string[]): { file: string; args: string[] } {
  const script =
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; ' +
    `read -r go <&${GO_FD} || exit 125; [ "$go" = go ] || exit 125; exec "$@"`;
  return {
    file: '/bin/sh',
    args: ['-c', script, 'capsule-exec', String(cgroupProcsFiles.length), ...cgroupProcsFiles, ...argv],
  };
}

/** Base environment of every exec; capsule and exec env are layered over it. */
export function baseEnv(hostname: string): Record<string, string> {
  return {
    PATH: '/usr/local/bin:/usr/bin:/bin',
    HOME: '/tmp',
    TMPDIR: '/tmp',
    USER: 'capsule',
    LOGNAME: 'capsule',
    LANG: 'C.UTF-8',
    HOSTNAME: hostname,
  };
}

/** One filesystem entry bubblewrap sets up inside the sandbox, read back from its argv. */
export interface SandboxMount {
  /** The bwrap option: ro-bind, bind, symlink, proc, dev, tmpfs, remount-ro... */
  kind: string;
  /** Path inside the sandbox. */
  dest: string;
  /** Host source (binds) or link target (symlinks). */
  source?: string;
}

const TWO_ARG_MOUNTS = new Set(['--ro-bind', '--bind', '--dev-bind', '--ro-bind-try', '--bind-try', '--symlink']);
const ONE_ARG_MOUNTS = new Set(['--proc', '--dev', '--tmpfs', '--mqueue', '--dir', '--remount-ro']);
/** Other bwrap options and how many values follow them (a value is never read as an option). */
const OPTION_VALUES: Record<string, number> = {
  '--setenv': 2,
  '--chmod': 2,
  '--file': 2,
  '--bind-data': 2,
  '--ro-bind-data': 2,
  '--unsetenv': 1,
  '--uid': 1,
  '--gid': 1,
  '--hostname': 1,
  '--chdir': 1,
  '--seccomp': 1,
  '--add-seccomp-fd': 1,
  '--info-fd': 1,
  '--json-status-fd': 1,
  '--block-fd': 1,
  '--userns-block-fd': 1,
  '--sync-fd': 1,
  '--lock-file': 1,
  '--cap-drop': 1,
  '--cap-add': 1,
  '--args': 1,
  '--argv0': 1,
  '--userns': 1,
  '--userns2': 1,
  '--pidns': 1,
  '--exec-label': 1,
  '--file-label': 1,
  '--perms': 1,
  '--size': 1,
};

/**
 * The mounts of a sandbox argv in order (what docs/SECURITY.md lists and a
 * test keeps in sync). Stops at `--`: what follows is the command.
 */
export function sandboxMounts(argv: string[]): SandboxMount[] {
  const out: SandboxMount[] = [];
  const start = argv.indexOf('bwrap');
  for (let i = start + 1; i < argv.length && argv[i] !== '--'; i++) {
    const a = argv[i]!;
    if (TWO_ARG_MOUNTS.has(a)) {
      out.push({ kind: a.slice(2), source: argv[i + 1]!, dest: argv[i + 2]! });
      i += 2;
    } else if (ONE_ARG_MOUNTS.has(a)) {
      out.push({ kind: a.slice(2), dest: argv[i + 1]! });
      i += 1;
    } else {
      i += OPTION_VALUES[a] ?? 0;
    }
  }
  return out;
}
