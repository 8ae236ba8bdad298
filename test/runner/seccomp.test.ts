// The policy compiler: structure of the emitted BPF, bounded jumps however
// long the list, and validation of the policy data.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { compilePolicy, loadPolicy, parsePolicy } from '../../sandbox-runner/seccomp.js';

const POLICY = fileURLToPath(new URL('../../../policies/seccomp-allowlist.yaml', import.meta.url));

function insns(buf: Buffer): { code: number; jt: number; jf: number; k: number }[] {
  const out = [];
  for (let i = 0; i < buf.length; i += 8)
    out.push({ code: buf.readUInt16LE(i), jt: buf[i + 2]!, jf: buf[i + 3]!, k: buf.readUInt32LE(i + 4) });
  return out;
}

t.test('the shipped policy compiles to a well-formed program', async (t) => {
  const p = loadPolicy(POLICY);
  const prog = insns(compilePolicy(p));
  t.ok(prog.length < 4096);
  t.same(prog[0], { code: 0x20, jt: 0, jf: 0, k: 4 }, 'load arch');
  t.same(prog[1], { code: 0x15, jt: 1, jf: 0, k: 0xc000003e }, 'arch == x86_64');
  t.same(prog[2], { code: 0x06, jt: 0, jf: 0, k: 0x80000000 }, 'else kill process');
  t.same(prog[3], { code: 0x20, jt: 0, jf: 0, k: 0 }, 'load nr');
  t.same(prog[4], { code: 0x35, jt: 0, jf: 1, k: 0x40000000 }, 'x32 bit set?');
  t.same(prog[5], { code: 0x06, jt: 0, jf: 0, k: 0x80000000 }, 'x32 -> kill process');
  t.same(prog[prog.length - 1], { code: 0x06, jt: 0, jf: 0, k: 0x00050001 }, 'default errno EPERM');
  prog.forEach((ins, i) => {
    if ((ins.code & 0x07) === 0x05)
      t.ok(i + 1 + Math.max(ins.jt, ins.jf) < prog.length, `jump at ${i} stays in the program`);
  });
  const allowed = p.syscalls.filter((s) => !s.errno).map((s) => s.name);
  for (const must of ['read', 'write', 'execve', 'clone', 'openat', 'exit_group']) t.ok(allowed.includes(must), must);
  for (const never of [
    'ptrace',
    'bpf',
    'mount',
    'unshare',
    'setns',
    'keyctl',
    'perf_event_open',
    'init_module',
    'io_uring_setup',
    'clone3',
  ]) {
    t.notOk(allowed.includes(never), `${never} not allowed`);
  }
  t.ok(
    p.syscalls.every((s) => s.why.length > 5),
    'every entry says why',
  );
});

t.test('a long list never overflows the 8-bit jumps', async (t) => {
  const syscalls = Array.from({ length: 400 }, (_, i) => ({ name: `s${i}`, nr: i, why: 'test entry' }));
  const prog = insns(
    compilePolicy({
      arch: 'x86_64',
      wrong_arch_action: 'kill_process',
      x32_action: 'kill_process',
      default_errno: 'EPERM',
      syscalls,
    }),
  );
  t.ok(prog.every((i) => i.jt <= 255 && i.jf <= 255));
  t.equal(prog.length, 6 + 400 * 2 + 1);
});

t.test('bad policy data is refused with the entry named', async (t) => {
  const base =
    'arch: x86_64\nwrong_arch_action: kill_process\nx32_action: kill_process\ndefault_errno: EPERM\nsyscalls:\n';
  t.throws(() => parsePolicy(`${base}  - {name: read, nr: 0}\n`), /needs a why/, 'missing why');
  t.throws(
    () => parsePolicy(`${base}  - {name: read, nr: 0, why: a}\n  - {name: read2, nr: 0, why: b}\n`),
    /duplicate/,
  );
  t.throws(() => parsePolicy(`${base}  - {name: read, nr: 0, why: a, errno: EWHAT}\n`), /errno/);
  t.throws(() => parsePolicy(base.replace('x86_64', 'aarch64') + '  - {name: read, nr: 0, why: a}\n'), /arch/);
  t.throws(() => parsePolicy(`${base}  - {name: socket, nr: 41, why: a, arg_in: {arg: 9, values: [1]}}\n`), /arg_in/);
});

t.test('docs/SECURITY.md lists exactly the allowed syscalls', async (t) => {
  const doc = readFileSync(fileURLToPath(new URL('../../../docs/SECURITY.md', import.meta.url)), 'utf8');
  const p = loadPolicy(POLICY);
  const m = /<!-- syscalls:begin -->([\s\S]*?)<!-- syscalls:end -->/.exec(doc);
  t.ok(m, 'generated block present');
  const listed = [...(m?.[1] ?? '').matchAll(/^\| `([a-z0-9_]+)` \|/gm)].map((x) => x[1]);
  t.same(
    listed,
    p.syscalls.map((s) => s.name),
  );
});
