// Escape battery: every attempt runs inside a real capsule (sh / python3)
// and must fail. A probe prints ESCAPED only when the attack worked.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { ExecResult } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';

const py = (code: string): string => `python3 - <<'PYEOF'\n${code}\nPYEOF`;

/** Python that calls a raw syscall and prints ESCAPED when it returns >= 0. */
const sys = (nr: number, ...args: number[]): string =>
  py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(${[nr, ...args].join(', ')})
print("ESCAPED" if r >= 0 else "denied errno=%d" % ctypes.get_errno())`);

t.test('escape battery', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'victim', memory_mb: 128 });
  await c.create({ capsule_id: 'attacker', memory_mb: 256 });
  const run = (command: string, id = 'attacker'): Promise<ExecResult> =>
    c.exec({ capsule_id: id, command, timeout_ms: 20000 });

  // A host secret outside every path the capsule binds.
  const secretDir = `/var/tmp/capsule-secret-${randomBytes(6).toString('hex')}`;
  const secret = `HOSTSECRET-${randomBytes(12).toString('hex')}`;
  mkdirSync(secretDir, { mode: 0o755 });
  writeFileSync(`${secretDir}/secret.txt`, secret, { mode: 0o644 });
  t.teardown(() => rmSync(secretDir, { recursive: true, force: true }));

  const victimMarker = `VICTIM-${randomBytes(12).toString('hex')}`;
  t.equal(
    (await run(`echo ${victimMarker} > /data/output/v.txt; echo ${victimMarker} > /tmp/v.txt`, 'victim')).exit_code,
    0,
  );

  const noEscape = (
    tt: { notMatch: (found: string, wanted: RegExp, msg: string) => unknown },
    res: ExecResult,
    what: string,
  ): void => {
    tt.notMatch(res.stdout, /ESCAPED/, `${what}: ${res.stdout.trim()} ${res.stderr.trim()}`.slice(0, 300));
  };

  await t.test('read a host secret file', async (t) => {
    const res = await run(
      `cat ${secretDir}/secret.txt /proc/1/root${secretDir}/secret.txt /etc/shadow 2>&1; ls /root /home /var 2>&1; true`,
    );
    t.notMatch(res.stdout, new RegExp(secret));
    t.match(res.stdout, /No such file/);
  });

  await t.test('no descriptor of the runner leaks into the capsule', async (t) => {
    // ls itself holds one fd open on /proc/<pid>/fd while listing; anything else above 2 is a leak.
    const res = await run("ls -l /proc/self/fd | tail -n +2 | sed 's/.* \\([0-9]*\\) -> /\\1 /'");
    const extra = res.stdout
      .trim()
      .split('\n')
      .filter((l) => Number(l.split(' ')[0]) > 2 && !/^\d+ \/proc\/\d+\/fd$/.test(l));
    t.same(extra, [], `only stdio: ${res.stdout}`);
  });

  await t.test('write the base image', async (t) => {
    const res = await run(
      'for f in /usr/bin/capsule-x /etc/passwd /bin/sh /x; do (echo hi > $f) 2>/dev/null && echo "ESCAPED $f"; done; touch /usr/lib/y 2>/dev/null && echo ESCAPED; true',
    );
    noEscape(t, res, 'write base image');
    t.equal(res.exit_code, 0);
  });

  await t.test('mount and umount', async (t) => {
    noEscape(
      t,
      await run(
        'mkdir -p /tmp/m; mount -t tmpfs none /tmp/m 2>/dev/null && echo ESCAPED; umount /data/input 2>/dev/null && echo ESCAPED; true',
      ),
      'mount(8)',
    );
    noEscape(t, await run(sys(165, 0, 0, 0, 0, 0)), 'mount(2)');
    noEscape(t, await run(sys(166, 0, 0)), 'umount2(2)');
    const res = await run(
      py(`import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("ESCAPED" if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0 else "denied")
print("ESCAPED" if libc.umount2(b"/data/input", 2) == 0 else "denied")`),
    );
    noEscape(t, res, 'libc mount');
    t.match(res.stdout, /denied/);
  });

  await t.test('nested user namespace', async (t) => {
    noEscape(
      t,
      await run('unshare -U true 2>/dev/null && echo ESCAPED; unshare -Ur id 2>/dev/null && echo ESCAPED; true'),
      'unshare(1)',
    );
    noEscape(t, await run(sys(272, 0x10000000)), 'unshare(CLONE_NEWUSER)');
    noEscape(t, await run(sys(272, 0x20000)), 'unshare(CLONE_NEWNS)');
    noEscape(t, await run(sys(272, 0x40000000)), 'unshare(CLONE_NEWNET)');
    // clone(CLONE_NEWUSER|SIGCHLD): a child that exits at once; parent prints ESCAPED on success.
    noEscape(
      t,
      await run(
        py(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)
if r == 0: os._exit(0)
print("ESCAPED" if r > 0 else "denied errno=%d" % ctypes.get_errno())`),
      ),
      'clone(CLONE_NEWUSER)',
    );
    noEscape(t, await run(sys(308, 0, 0)), 'setns');
  });

  await t.test('ptrace', async (t) => {
    const res = await run(
      py(`import ctypes, subprocess, time
libc = ctypes.CDLL(None, use_errno=True)
p = subprocess.Popen(["sleep", "5"])
time.sleep(0.1)
r = libc.ptrace(16, p.pid, 0, 0)
print("ESCAPED" if r == 0 else "denied errno=%d" % ctypes.get_errno())
p.kill()`),
    );
    noEscape(t, res, 'ptrace attach');
    t.match(res.stdout, /denied errno=1/);
    noEscape(t, await run(sys(101, 0, 0, 0, 0)), 'ptrace(TRACEME)');
    noEscape(t, await run(sys(310, 1, 0, 0, 0, 0, 0)), 'process_vm_readv');
  });

  await t.test('bpf, perf_event_open, keyctl, io_uring, kernel modules', async (t) => {
    const probes: [string, number, number[]][] = [
      ['bpf', 321, [0, 0, 0]],
      ['perf_event_open', 298, [0, 0, -1, -1, 0]],
      ['keyctl', 250, [0, 0, 0]],
      ['add_key', 248, [0, 0, 0, 0, 0]],
      ['io_uring_setup', 425, [8, 0]],
      ['init_module', 175, [0, 0, 0]],
      ['finit_module', 313, [0, 0, 0]],
      ['delete_module', 176, [0, 0]],
      ['kexec_load', 246, [0, 0, 0, 0]],
      ['reboot', 169, [0, 0, 0, 0]],
      ['userfaultfd', 323, [0]],
      ['pivot_root', 155, [0, 0]],
      ['chroot', 161, [0]],
      ['open_by_handle_at', 304, [0, 0, 0]],
      ['name_to_handle_at', 303, [0, 0, 0, 0, 0]],
      ['process_vm_readv', 310, [1, 0, 0, 0, 0, 0]],
      ['mount', 165, [0, 0, 0, 0, 0]],
      ['setns', 308, [0, 0]],
      ['modify_ldt', 154, [0, 0, 0]],
    ];
    for (const [name, nr, args] of probes) {
      const res = await run(sys(nr, ...args));
      noEscape(t, res, name);
      t.match(res.stdout, /denied errno=(1|38)\b/, `${name} refused by seccomp`);
    }
    // setuid is allowed by the filter (Docker's default allows it): without
    // capabilities the kernel itself refuses, EINVAL as uid 0 is not mapped.
    const su = await run(sys(105, 0));
    noEscape(t, su, 'setuid(0)');
    t.match(su.stdout, /denied errno=(1|22)\b/, 'setuid(0) refused by the kernel');
    noEscape(
      t,
      await run('modprobe dummy 2>/dev/null && echo ESCAPED; insmod /x.ko 2>/dev/null && echo ESCAPED; true'),
      'modprobe',
    );
  });

  await t.test('raw and netlink sockets', async (t) => {
    const res = await run(
      py(`import socket
for fam, typ, proto, name in [(socket.AF_INET, socket.SOCK_RAW, 1, "raw icmp"), (socket.AF_INET6, socket.SOCK_RAW, 58, "raw icmp6"),
                              (16, socket.SOCK_RAW, 6, "netlink xfrm"), (16, socket.SOCK_RAW, 12, "netlink netfilter"),
                              (16, socket.SOCK_RAW, 9, "netlink audit"), (16, socket.SOCK_DGRAM, 15, "netlink uevent"),
                              (17, socket.SOCK_RAW, 0, "packet"), (socket.AF_INET, socket.SOCK_PACKET if hasattr(socket, "SOCK_PACKET") else 10, 0, "sock_packet")]:
    try:
        s = socket.socket(fam, typ, proto)
        print("ESCAPED", name)
        s.close()
    except OSError as e:
        print("denied", name, e.errno)`),
    );
    noEscape(t, res, 'raw/netlink sockets');
    t.equal((res.stdout.match(/denied/g) ?? []).length, 8);
    // NETLINK_ROUTE is allowed (interface listing), but changes need CAP_NET_ADMIN.
    const route = await run(
      'ip=/usr/sbin/ip; $ip -o link show; $ip link set lo down && echo ESCAPED; $ip addr add 10.9.9.9/32 dev lo && echo ESCAPED; $ip link add d0 type dummy && echo ESCAPED; true',
    );
    noEscape(t, route, 'rtnetlink changes');
    t.match(route.stdout, /^1: lo:/m, 'the capsule sees its loopback through NETLINK_ROUTE');
    t.notMatch(route.stdout, /^2: /m, 'and nothing else');
  });

  await t.test('outbound TCP and UDP, and the host loopback', async (t) => {
    const server = createServer((s) => s.end('HOSTSERVICE'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.teardown(() => server.close());
    const port = (server.address() as { port: number }).port;
    const res = await run(
      py(`import socket
for host, port in [("1.1.1.1", 80), ("8.8.8.8", 53), ("127.0.0.1", ${port}), ("10.0.2.2", 80)]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("ESCAPED tcp", host, port, s.recv(100))
    except OSError as e:
        print("denied tcp", host, e.errno)
    s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("8.8.8.8", 53))
    print("ESCAPED udp")
except OSError as e:
    print("denied udp", e.errno)
import subprocess
print(subprocess.run(["cat", "/proc/net/dev"], capture_output=True, text=True).stdout)`),
    );
    noEscape(t, res, 'network');
    t.notMatch(res.stdout, /HOSTSERVICE/);
    t.equal((res.stdout.match(/denied/g) ?? []).length, 5);
    const ifaces = res.stdout
      .split('\n')
      .filter((l) => /^\s*\w+:/.test(l))
      .map((l) => l.trim().split(':')[0]);
    t.same(ifaces, ['lo'], 'loopback is the only interface');
  });

  await t.test('setuid binaries and no_new_privs', async (t) => {
    const res = await run(
      'grep NoNewPrivs /proc/self/status; grep CapEff /proc/self/status; for b in /usr/bin/su /usr/bin/mount /usr/bin/passwd /usr/bin/newgrp; do [ -u $b ] && echo "suid present $b"; $b -c id root </dev/null 2>/dev/null | grep -q "uid=0" && echo ESCAPED; done; id -u',
    );
    noEscape(t, res, 'setuid');
    t.match(res.stdout, /NoNewPrivs:\s+1/);
    t.match(res.stdout, /CapEff:\s+0000000000000000/);
    t.match(res.stdout, /1000\n$/);
  });

  await t.test('mknod', async (t) => {
    noEscape(
      t,
      await run(
        'mknod /tmp/null c 1 3 2>/dev/null && echo ESCAPED; mknod /tmp/sda b 8 0 2>/dev/null && echo ESCAPED; true',
      ),
      'mknod(1)',
    );
    noEscape(t, await run(sys(133, 0, 0x2000, 0x103)), 'mknod(2)');
  });

  await t.test('/proc/sys and /sys writes', async (t) => {
    const res = await run(
      'echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo ESCAPED; echo x > /proc/sys/kernel/hostname 2>/dev/null && echo ESCAPED; echo c > /proc/sysrq-trigger 2>/dev/null && echo ESCAPED; echo 1 > /sys/kernel/mm/ksm/run 2>/dev/null && echo ESCAPED; ls /sys 2>&1 | head -3; true',
    );
    noEscape(t, res, '/proc/sys');
  });

  await t.test('host and other capsules are invisible in /proc', async (t) => {
    const res = await run(`ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '`);
    const count = Number(res.stdout.split('\n')[0]);
    t.ok(count > 0 && count <= 6, `only the capsule's own processes are visible (${count})`);
    t.notMatch(res.stdout, /node|main\.js|process_api|tap/, 'no host process visible');
    t.notMatch(res.stdout, new RegExp(victimMarker));
  });

  await t.test("another live capsule's files", async (t) => {
    const victimDir = `${r.stateDir}/capsules/victim`;
    const res = await run(
      `cat ${victimDir}/output/v.txt ${victimDir}/tmp/v.txt /data/output/v.txt /tmp/v.txt 2>&1; ls ${r.stateDir} 2>&1; grep -rs ${victimMarker} /data /tmp /dev /etc 2>/dev/null && echo ESCAPED; true`,
    );
    t.notMatch(res.stdout, new RegExp(`${victimMarker}\\n`), 'victim marker not readable');
    noEscape(t, res, 'cross-capsule');
    // and the victim still has it
    t.match((await run('cat /data/output/v.txt', 'victim')).stdout, new RegExp(victimMarker));
  });

  await t.test('download through a planted symlink to a host file', async (t) => {
    const res = await run(
      `ln -s ${secretDir}/secret.txt /data/output/leak.txt; ln -s /etc/passwd /data/output/passwd; ln -s / /data/output/root; echo ok > /data/output/real.txt; ls -l /data/output`,
    );
    t.equal(res.exit_code, 0);
    await t.rejects(c.readOutput('attacker', 'leak.txt'), { code: 'invalid', message: /symbolic link/ });
    await t.rejects(c.readOutput('attacker', 'passwd'), { code: 'invalid' });
    await t.rejects(c.readOutput('attacker', 'root'), { code: 'invalid' });
    const list = await c.listOutput('attacker');
    t.same(
      list.map((f) => f.filename),
      ['real.txt'],
      'symlinks are not listed',
    );
    // An upload onto a planted symlink must not write through it.
    await run(`ln -s ${secretDir}/secret.txt /data/input/planted`);
    await t.rejects(c.upload('attacker', 'planted', Buffer.from('overwrite')), { code: 'invalid' });
    await t.rejects(
      c.exec({
        capsule_id: 'attacker',
        command: 'true',
        input_b64: Buffer.from('x').toString('base64'),
        input_filename: '/data/input/planted',
        timeout_ms: 5000,
      }),
      { code: 'invalid' },
    );
    const { readFileSync } = await import('node:fs');
    t.equal(readFileSync(`${secretDir}/secret.txt`, 'utf8'), secret, 'host file untouched');
  });

  await t.test('upload names with traversal', async (t) => {
    for (const name of ['../../etc/x', '/etc/x', 'a/b', '..', '.', '', 'x\0y', 'new\nline', 'a'.repeat(256)]) {
      await t.rejects(
        c.upload('attacker', name, Buffer.from('x')),
        { code: 'invalid', message: /filename/ },
        JSON.stringify(name).slice(0, 40),
      );
    }
    await t.rejects(c.readOutput('attacker', '../../etc/passwd'), { code: 'invalid' });
    for (const p of ['/etc/x', '/data/input/../../etc/x', '/data/input/a/b', '/data/inputx', 'data/input/x']) {
      await t.rejects(
        c.exec({ capsule_id: 'attacker', command: 'true', input_b64: 'eA==', input_filename: p, timeout_ms: 5000 }),
        { code: 'invalid', message: /input_filename/ },
        p,
      );
    }
  });
});
