// The compiled seccomp program, run in a BPF interpreter (no root, no
// kernel filter needed): every policy entry gives its action, every other
// number the default errno, another architecture or the x32 ABI kills the
// process, and the argument filters (clone namespace flags, socket
// families and types, ioctl TIOCSTI, personality) hold.
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  compilePolicy,
  loadPolicy,
  parsePolicy,
  type SeccompPolicy,
  type SyscallRule,
} from '../../sandbox-runner/seccomp.js';
import {
  actionName,
  AUDIT_ARCH_I386,
  check,
  decode,
  RET_ALLOW,
  RET_ERRNO,
  RET_KILL_PROCESS,
  run,
  X32_SYSCALL_BIT,
  type Insn,
} from '../helpers/bpf.js';

const POLICY = fileURLToPath(new URL('../../../policies/seccomp-allowlist.yaml', import.meta.url));
const ERRNO: Record<string, number> = { EPERM: 1, ENOSYS: 38, EACCES: 13, EAFNOSUPPORT: 97, EOPNOTSUPP: 95 };
const EPERM = RET_ERRNO | 1;

const policy = loadPolicy(POLICY);
const prog = decode(compilePolicy(policy));
const byName = new Map(policy.syscalls.map((s) => [s.name, s]));
const nrOf = (name: string): number => {
  const r = byName.get(name);
  if (!r) throw new Error(`${name} is not in the policy`);
  return r.nr;
};
const act = (nr: number, args: (number | bigint)[] = [], arch?: number): string =>
  actionName(run(prog, { nr, args, ...(arch !== undefined ? { arch } : {}) }));

/** Arguments that pass every argument rule of an entry. */
function benignArgs(r: SyscallRule): number[] {
  const args = [0, 0, 0, 0, 0, 0];
  if (r.allow_when) {
    // The first alternative, satisfied: first value of each `in`, a value outside each `not_in`.
    for (const c of r.allow_when[0]!) {
      if (c.in) args[c.arg] = c.in[0]!;
      else {
        let v = 1;
        while (c.not_in!.includes(v & (c.mask ?? 0xffffffff))) v++;
        args[c.arg] = v;
      }
    }
    return args;
  }
  if (r.arg_in) args[r.arg_in.arg] = r.arg_in.values[0]!;
  if (r.deny_arg_values && (!r.arg_in || r.arg_in.arg !== r.deny_arg_values.arg)) {
    let v = 1;
    while (r.deny_arg_values.values.includes(v & (r.deny_arg_values.mask ?? 0xffffffff))) v++;
    args[r.deny_arg_values.arg] = v;
  }
  return args;
}

t.test('the program passes the kernel-style structural checks', async (t) => {
  t.doesNotThrow(() => check(prog));
  t.ok(prog.length <= 4096, `${prog.length} instructions`);
  // The checker itself refuses what the kernel refuses.
  const ret: Insn = { code: 0x06, jt: 0, jf: 0, k: RET_ALLOW };
  t.throws(() => check([{ code: 0x20, jt: 0, jf: 0, k: 64 }, ret]), /outside/, 'load past seccomp_data');
  t.throws(() => check([{ code: 0x20, jt: 0, jf: 0, k: 2 }, ret]), /unaligned/, 'unaligned load');
  t.throws(() => check([{ code: 0x15, jt: 5, jf: 0, k: 0 }, ret]), /out of range/, 'jump past the end');
  t.throws(() => check([{ code: 0x20, jt: 0, jf: 0, k: 0 }]), /RET/, 'no RET at the end');
  t.throws(() => check([{ code: 0x28, jt: 0, jf: 0, k: 0 }, ret]), /not allowed/, 'halfword load');
});

t.test('every policy entry gives its own action', async (t) => {
  let checked = 0;
  for (const r of policy.syscalls) {
    const want = r.errno ? `ERRNO(${ERRNO[r.errno]})` : 'ALLOW';
    t.equal(act(r.nr, benignArgs(r)), want, `${r.name} (${r.nr}) -> ${want}`);
    checked++;
  }
  t.equal(checked, policy.syscalls.length);
});

t.test('every number not in the policy gets the default errno', async (t) => {
  const listed = new Set(policy.syscalls.map((s) => s.nr));
  let n = 0;
  for (let nr = 0; nr < 1024; nr++) {
    if (listed.has(nr)) continue;
    const a = run(prog, { nr, args: [0, 0, 0, 0, 0, 0] });
    if (a !== EPERM) t.fail(`nr ${nr}: ${actionName(a)}`);
    n++;
  }
  t.ok(n > 600, `${n} unlisted numbers checked`);
  t.equal(act(0x3fffffff), 'ERRNO(1)', 'highest number below the x32 bit');
});

t.test('another architecture or the x32 ABI kills the process', async (t) => {
  for (const arch of [AUDIT_ARCH_I386, 0xc00000b7 /* aarch64 */, 0, 0xffffffff]) {
    for (const nr of [0, 1, nrOf('execve'), 500])
      t.equal(act(nr, [], arch), 'KILL_PROCESS', `arch 0x${arch.toString(16)} nr ${nr}`);
  }
  // x32 numbers are the x86_64 ones with bit 30 set (execve is 520 there).
  // -1 (0xffffffff) has the bit set too: killed, not refused.
  for (const nr of [0, 1, 520, nrOf('openat'), 0x3fffffff, 0xffffffff])
    t.equal(run(prog, { nr: (nr | X32_SYSCALL_BIT) >>> 0 }), RET_KILL_PROCESS, `x32 nr ${nr}`);
});

t.test('clone: namespace flags refused, fork and thread flags allowed', async (t) => {
  const clone = nrOf('clone');
  const SIGCHLD = 17;
  const forkFlags = 0x01200000 | SIGCHLD; // CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID (glibc fork)
  const threadFlags = 0x003d0f00; // glibc pthread_create
  const spawnFlags = 0x00004100 | SIGCHLD; // CLONE_VM|CLONE_VFORK (posix_spawn)
  for (const f of [forkFlags, threadFlags, spawnFlags, SIGCHLD])
    t.equal(act(clone, [f]), 'ALLOW', `0x${f.toString(16)}`);
  const ns: Record<string, number> = {
    CLONE_NEWNS: 0x00020000,
    CLONE_NEWCGROUP: 0x02000000,
    CLONE_NEWUTS: 0x04000000,
    CLONE_NEWIPC: 0x08000000,
    CLONE_NEWUSER: 0x10000000,
    CLONE_NEWPID: 0x20000000,
    CLONE_NEWNET: 0x40000000,
  };
  for (const [name, flag] of Object.entries(ns)) {
    t.equal(act(clone, [flag | SIGCHLD]), 'ERRNO(1)', name);
    t.equal(act(clone, [flag | threadFlags]), 'ERRNO(1)', `${name} with thread flags`);
  }
  t.equal(act(nrOf('clone3')), 'ERRNO(38)', 'clone3 ENOSYS: its flags are out of BPF reach');
  for (const name of ['unshare', 'setns']) t.equal(act(nrOf(name), [0x10000000]), 'ERRNO(1)', name);
});

t.test('socket: unix/inet/inet6 stream and datagram, netlink route only', async (t) => {
  const socket = nrOf('socket');
  const FLAGS = 0x80800; // SOCK_CLOEXEC|SOCK_NONBLOCK
  for (const family of [1, 2, 10])
    for (const type of [1, 2, 5])
      for (const flags of [0, FLAGS])
        t.equal(act(socket, [family, type | flags, 0]), 'ALLOW', `${family}/${type}|${flags}`);
  for (const family of [1, 2, 10]) {
    t.equal(act(socket, [family, 3, 0]), 'ERRNO(1)', `SOCK_RAW in family ${family}`);
    t.equal(act(socket, [family, 3 | FLAGS, 255]), 'ERRNO(1)', `SOCK_RAW with flags in family ${family}`);
    t.equal(act(socket, [family, 10, 0]), 'ERRNO(1)', `SOCK_PACKET in family ${family}`);
  }
  // AF_NETLINK: NETLINK_ROUTE (0) only, as SOCK_RAW or SOCK_DGRAM (glibc getifaddrs uses SOCK_RAW|SOCK_CLOEXEC).
  t.equal(act(socket, [16, 3 | 0x80000, 0]), 'ALLOW', 'netlink route raw');
  t.equal(act(socket, [16, 2, 0]), 'ALLOW', 'netlink route dgram');
  const netlink: Record<string, number> = {
    XFRM: 6,
    AUDIT: 9,
    NETFILTER: 12,
    KOBJECT_UEVENT: 15,
    GENERIC: 16,
    SOCK_DIAG: 4,
  };
  for (const [name, proto] of Object.entries(netlink))
    t.equal(act(socket, [16, 3, proto]), 'ERRNO(1)', `NETLINK_${name}`);
  const refused: Record<string, number> = {
    AF_UNSPEC: 0,
    AF_PACKET: 17,
    AF_BLUETOOTH: 31,
    AF_ALG: 38,
    AF_VSOCK: 40,
    AF_XDP: 44,
  };
  for (const [name, family] of Object.entries(refused)) {
    t.equal(act(socket, [family, 2, 0]), 'ERRNO(1)', name);
    t.equal(act(socket, [family, 3, 0]), 'ERRNO(1)', `${name} raw`);
  }
  // The kernel reads int arguments: high bits must not smuggle a family past the filter.
  t.equal(act(socket, [(1n << 32n) | 17n, 2, 0]), 'ERRNO(1)', 'AF_PACKET with high bits set');
  t.equal(act(socket, [16, 3, (1n << 32n) | 6n]), 'ERRNO(1)', 'NETLINK_XFRM with high bits set');
});

t.test('ioctl: TIOCSTI and TIOCLINUX refused, terminal queries allowed', async (t) => {
  const ioctl = nrOf('ioctl');
  for (const cmd of [0x5412, 0x541c]) {
    t.equal(act(ioctl, [0, cmd]), 'ERRNO(1)', `0x${cmd.toString(16)}`);
    t.equal(act(ioctl, [0, (1n << 32n) | BigInt(cmd)]), 'ERRNO(1)', `0x${cmd.toString(16)} with high bits`);
  }
  for (const cmd of [0x5401 /* TCGETS */, 0x5413 /* TIOCGWINSZ */, 0x5421 /* FIONBIO */, 0x540f /* TIOCGPGRP */])
    t.equal(act(ioctl, [0, cmd]), 'ALLOW', `0x${cmd.toString(16)}`);
});

t.test('personality: only the values Docker allows', async (t) => {
  const p = nrOf('personality');
  for (const v of [0, 8, 0x20000, 0x20008, 0xffffffff]) t.equal(act(p, [v]), 'ALLOW', `0x${v.toString(16)}`);
  for (const v of [
    0x0400000 /* READ_IMPLIES_EXEC */, 0x0040000 /* ADDR_NO_RANDOMIZE */, 0x0800000 /* ADDR_LIMIT_32BIT */,
  ])
    t.equal(act(p, [v]), 'ERRNO(1)', `0x${v.toString(16)}`);
});

t.test('dangerous families are explicit refusals; everyday calls are allowed', async (t) => {
  const refused = [
    'unshare',
    'setns',
    'mount',
    'umount2',
    'pivot_root',
    'chroot',
    'open_tree',
    'move_mount',
    'fsopen',
    'fsconfig',
    'fsmount',
    'fspick',
    'mount_setattr',
    'bpf',
    'perf_event_open',
    'keyctl',
    'add_key',
    'request_key',
    'io_uring_setup',
    'io_uring_enter',
    'io_uring_register',
    'userfaultfd',
    'ptrace',
    'process_vm_readv',
    'process_vm_writev',
    'kexec_load',
    'kexec_file_load',
    'init_module',
    'finit_module',
    'delete_module',
    'open_by_handle_at',
    'name_to_handle_at',
  ];
  for (const name of refused) {
    const r = byName.get(name);
    t.ok(r?.errno, `${name} is an explicit refusal`);
    t.match(r?.why ?? '', /^refused: .{20,}/, `${name} says why`);
    t.match(act(nrOf(name), [0, 0, 0, 0, 0, 0]), /^ERRNO/, `${name} refused`);
  }
  const everyday = [
    'getpgrp',
    'epoll_wait',
    'prlimit64',
    'sched_getaffinity',
    'statfs',
    'fstatfs',
    'getgroups',
    'sysinfo',
    'sigaltstack',
    'restart_syscall',
    'setsid',
    'pselect6',
    'ppoll',
  ];
  for (const name of everyday) t.equal(act(nrOf(name)), 'ALLOW', name);
});

t.test('names and numbers agree with the x86_64 syscall table', async (t) => {
  const header = '/usr/include/x86_64-linux-gnu/asm/unistd_64.h';
  if (!existsSync(header)) return t.plan(0, `${header} not installed (linux-libc-dev)`);
  const table = new Map<string, number>();
  for (const m of readFileSync(header, 'utf8').matchAll(/^#define __NR_(\w+) (\d+)$/gm)) table.set(m[1]!, Number(m[2]));
  let known = 0;
  for (const r of policy.syscalls) {
    const nr = table.get(r.name);
    if (nr === undefined) {
      // Newer than the installed headers: must sit above the header's highest number.
      t.ok(r.nr > Math.max(...table.values()), `${r.name} (${r.nr}) is newer than ${header}`);
      continue;
    }
    known++;
    if (nr !== r.nr) t.fail(`${r.name}: policy says ${r.nr}, the table says ${nr}`);
  }
  t.ok(known > 300, `${known} entries checked against the table`);
});

t.test('every rule kind compiles to the behaviour it names (synthetic policy)', async (t) => {
  const p: SeccompPolicy = {
    arch: 'x86_64',
    wrong_arch_action: 'kill_process',
    x32_action: 'kill_process',
    default_errno: 'EACCES',
    syscalls: [
      { name: 'a', nr: 1, why: 'plain allow' },
      { name: 'b', nr: 2, why: 'refused', errno: 'ENOSYS' },
      { name: 'c', nr: 3, why: 'mask', deny_arg_mask: { arg: 2, mask: 0xf0 } },
      { name: 'd', nr: 4, why: 'in', arg_in: { arg: 5, mask: 0xff, values: [7, 9] } },
      {
        name: 'e',
        nr: 5,
        why: 'all three',
        deny_arg_mask: { arg: 0, mask: 0x1 },
        arg_in: { arg: 1, values: [10, 20] },
        deny_arg_values: { arg: 2, values: [99] },
      },
      {
        name: 'f',
        nr: 7,
        why: 'alternatives',
        allow_when: [
          [
            { arg: 0, in: [1, 2] },
            { arg: 1, mask: 0xf, not_in: [3] },
          ],
          [
            { arg: 0, in: [16] },
            { arg: 2, in: [0, 4] },
          ],
        ],
      },
      { name: 'g', nr: 8, why: 'after the alternatives' },
    ],
  };
  const q = decode(compilePolicy(p));
  check(q);
  const r = (nr: number, args: number[] = []): string => actionName(run(q, { nr, args }));
  t.equal(r(1), 'ALLOW');
  t.equal(r(2), 'ERRNO(38)');
  t.equal(r(6), 'ERRNO(13)', 'default errno');
  t.equal(r(3, [0, 0, 0x0f]), 'ALLOW');
  t.equal(r(3, [0, 0, 0x10]), 'ERRNO(13)');
  t.equal(r(4, [0, 0, 0, 0, 0, 0x107]), 'ALLOW', 'masked before comparing');
  t.equal(r(4, [0, 0, 0, 0, 0, 8]), 'ERRNO(13)');
  t.equal(r(5, [0, 20, 98]), 'ALLOW');
  t.equal(r(5, [1, 20, 98]), 'ERRNO(13)', 'mask hit');
  t.equal(r(5, [0, 30, 98]), 'ERRNO(13)', 'not in the set');
  t.equal(r(5, [0, 10, 99]), 'ERRNO(13)', 'denied value');
  t.equal(r(7, [2, 0x801]), 'ALLOW', 'first alternative');
  t.equal(r(7, [2, 0x803]), 'ERRNO(13)', 'first alternative, not_in hit');
  t.equal(r(7, [16, 3, 4]), 'ALLOW', 'second alternative');
  t.equal(r(7, [16, 3, 5]), 'ERRNO(13)', 'second alternative, value not in');
  t.equal(r(7, [17, 1, 0]), 'ERRNO(13)', 'no alternative');
  t.equal(r(8), 'ALLOW', 'the next block is still reached');
  t.throws(
    () =>
      parsePolicy(
        'arch: x86_64\nwrong_arch_action: kill_process\nx32_action: kill_process\ndefault_errno: EPERM\nsyscalls:\n' +
          '  - {name: s, nr: 41, why: x, allow_when: [[{arg: 0, in: [1], not_in: [2]}]]}\n',
      ),
    /exactly one of in\/not_in/,
  );
});
