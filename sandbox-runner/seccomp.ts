// Compiles policies/seccomp-allowlist.yaml into a raw classic-BPF seccomp
// program (array of struct sock_filter, little-endian) for `bwrap --seccomp FD`.
//
// Layout: arch check -> x32 check -> load nr -> one small block per syscall
// that either falls through to the next block or RETurns. Every jump stays
// inside its own block (a few instructions), so the 8-bit BPF jump offsets
// can never overflow however long the list grows. Default: errno.
// Argument checks read the low 32 bits of an argument: every argument they
// are used on is an int or unsigned int in the kernel (flags, family, type,
// protocol, ioctl command, personality), so the high bits are ignored there too.
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;
const BPF_ALU_AND_K = 0x54;
const BPF_JMP_JA = 0x05;

const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const AUDIT_ARCH_X86_64 = 0xc000003e;
const X32_SYSCALL_BIT = 0x40000000;

// struct seccomp_data offsets
const OFF_NR = 0;
const OFF_ARCH = 4;
const offArgLow = (i: number): number => 16 + 8 * i;

const ERRNOS: Record<string, number> = { EPERM: 1, ENOSYS: 38, EACCES: 13, EAFNOSUPPORT: 97, EOPNOTSUPP: 95 };

interface Insn {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

export interface ArgValues {
  arg: number;
  mask?: number;
  values: number[];
}
export interface ArgMask {
  arg: number;
  mask: number;
}

/** One condition on an argument's low 32 bits (after masking): in or not in a set. */
export interface ArgCond {
  arg: number;
  mask?: number;
  in?: number[];
  not_in?: number[];
}

export interface SyscallRule {
  name: string;
  nr: number;
  why: string;
  /** Refuse with this errno instead of allowing. */
  errno?: string;
  /** Refuse (default errno) when (arg & mask) != 0. */
  deny_arg_mask?: ArgMask;
  /** Allow only when arg is one of values. */
  arg_in?: ArgValues;
  /** Refuse when (arg & mask) is one of values. */
  deny_arg_values?: ArgValues;
  /**
   * Allow only when one of the alternatives holds (each a list of conditions
   * that must all hold); refuse with the default errno otherwise. Used alone.
   */
  allow_when?: ArgCond[][];
}

export interface SeccompPolicy {
  arch: 'x86_64';
  wrong_arch_action: 'kill_process';
  x32_action: 'kill_process';
  default_errno: string;
  syscalls: SyscallRule[];
}

export class PolicyError extends Error {}

function isInt(v: unknown, max = 0xffffffff): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= max;
}

function checkArgValues(v: unknown, where: string): ArgValues {
  const o = v as Partial<ArgValues>;
  if (!o || !isInt(o.arg, 5) || !Array.isArray(o.values) || o.values.length === 0 || !o.values.every((x) => isInt(x))) {
    throw new PolicyError(`${where}: needs {arg: 0..5, values: [u32...]}`);
  }
  if (o.mask !== undefined && !isInt(o.mask)) throw new PolicyError(`${where}: mask must be a u32`);
  return { arg: o.arg, values: o.values, ...(o.mask !== undefined ? { mask: o.mask } : {}) };
}

function checkAllowWhen(v: unknown, where: string): ArgCond[][] {
  if (!Array.isArray(v) || v.length === 0 || v.length > 16) throw new PolicyError(`${where}: needs 1..16 alternatives`);
  return v.map((alt, i) => {
    if (!Array.isArray(alt) || alt.length === 0 || alt.length > 6)
      throw new PolicyError(`${where}[${i}]: needs 1..6 conditions`);
    return alt.map((c: Partial<ArgCond>, j) => {
      const w = `${where}[${i}][${j}]`;
      if (!c || !isInt(c.arg, 5)) throw new PolicyError(`${w}.arg must be 0..5`);
      if (c.mask !== undefined && !isInt(c.mask)) throw new PolicyError(`${w}.mask must be a u32`);
      const list = (x: unknown): x is number[] =>
        Array.isArray(x) && x.length > 0 && x.length <= 32 && x.every((y) => isInt(y));
      if ((c.in === undefined) === (c.not_in === undefined) || !list(c.in ?? c.not_in))
        throw new PolicyError(`${w}: needs exactly one of in/not_in with 1..32 u32 values`);
      return {
        arg: c.arg,
        ...(c.mask !== undefined ? { mask: c.mask } : {}),
        ...(c.in ? { in: c.in } : { not_in: c.not_in! }),
      };
    });
  });
}

/** Parses and validates the policy text (YAML). */
export function parsePolicy(text: string): SeccompPolicy {
  const doc = parse(text) as Partial<SeccompPolicy> | null;
  if (!doc || doc.arch !== 'x86_64') throw new PolicyError('policy: arch must be x86_64');
  if (doc.wrong_arch_action !== 'kill_process' || doc.x32_action !== 'kill_process')
    throw new PolicyError('policy: wrong_arch_action and x32_action must be kill_process');
  if (typeof doc.default_errno !== 'string' || !(doc.default_errno in ERRNOS))
    throw new PolicyError('policy: default_errno must be a known errno name');
  if (!Array.isArray(doc.syscalls) || doc.syscalls.length === 0)
    throw new PolicyError('policy: syscalls must be a non-empty list');
  const seenNr = new Set<number>();
  const seenName = new Set<string>();
  const syscalls: SyscallRule[] = doc.syscalls.map((raw, i) => {
    const r = raw as Partial<SyscallRule>;
    const where = `policy.syscalls[${i}]`;
    if (typeof r.name !== 'string' || !/^[a-z0-9_]+$/.test(r.name)) throw new PolicyError(`${where}.name invalid`);
    if (!isInt(r.nr, 1023)) throw new PolicyError(`${where}.nr invalid for ${r.name}`);
    if (typeof r.why !== 'string' || r.why.trim() === '') throw new PolicyError(`${where}: ${r.name} needs a why`);
    if (seenNr.has(r.nr) || seenName.has(r.name)) throw new PolicyError(`${where}: duplicate ${r.name}/${r.nr}`);
    seenNr.add(r.nr);
    seenName.add(r.name);
    const out: SyscallRule = { name: r.name, nr: r.nr, why: r.why };
    if (r.errno !== undefined) {
      if (!(r.errno in ERRNOS)) throw new PolicyError(`${where}.errno unknown`);
      out.errno = r.errno;
    }
    if (r.deny_arg_mask !== undefined) {
      const m = r.deny_arg_mask;
      if (!m || !isInt(m.arg, 5) || !isInt(m.mask)) throw new PolicyError(`${where}.deny_arg_mask invalid`);
      out.deny_arg_mask = { arg: m.arg, mask: m.mask };
    }
    if (r.arg_in !== undefined) out.arg_in = checkArgValues(r.arg_in, `${where}.arg_in`);
    if (r.deny_arg_values !== undefined)
      out.deny_arg_values = checkArgValues(r.deny_arg_values, `${where}.deny_arg_values`);
    if (r.allow_when !== undefined) {
      if (out.errno || out.deny_arg_mask || out.arg_in || out.deny_arg_values)
        throw new PolicyError(`${where}.allow_when cannot be combined with other rules`);
      out.allow_when = checkAllowWhen(r.allow_when, `${where}.allow_when`);
    }
    return out;
  });
  return {
    arch: 'x86_64',
    wrong_arch_action: 'kill_process',
    x32_action: 'kill_process',
    default_errno: doc.default_errno,
    syscalls,
  };
}

export function loadPolicy(path: string): SeccompPolicy {
  return parsePolicy(readFileSync(path, 'utf8'));
}

const stmt = (code: number, k: number): Insn => ({ code, jt: 0, jf: 0, k: k >>> 0 });
const jump = (code: number, k: number, jt: number, jf: number): Insn => {
  if (jt > 255 || jf > 255) throw new PolicyError('BPF jump offset overflow');
  return { code, jt, jf, k: k >>> 0 };
};

/**
 * One alternative of allow_when: its conditions in turn, then RET allow. A
 * failing condition jumps to the alternative's end (the next alternative, or
 * the rule's RET deny).
 */
function alternative(conds: ArgCond[]): Insn[] {
  const out: Insn[] = [];
  const toFail: number[] = [];
  for (const c of conds) {
    out.push(stmt(BPF_LD_W_ABS, offArgLow(c.arg)));
    if (c.mask !== undefined) out.push(stmt(BPF_ALU_AND_K, c.mask));
    if (c.in) {
      // A match skips the remaining comparisons and the JA to the end.
      c.in.forEach((v, i) => out.push(jump(BPF_JEQ_K, v, c.in!.length - i, 0)));
      toFail.push(out.length);
      out.push(stmt(BPF_JMP_JA, 0));
    } else {
      for (const v of c.not_in!) {
        toFail.push(out.length);
        out.push(jump(BPF_JEQ_K, v, 0, 0));
      }
    }
  }
  out.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
  for (const pc of toFail) {
    const off = out.length - (pc + 1);
    const ins = out[pc]!;
    if (ins.code === BPF_JMP_JA) ins.k = off;
    else out[pc] = jump(ins.code, ins.k, off, 0);
  }
  return out;
}

/** The instructions of one syscall's block (everything after its JEQ). */
function ruleBody(r: SyscallRule, deny: number): Insn[] {
  if (r.errno) return [stmt(BPF_RET_K, SECCOMP_RET_ERRNO | ERRNOS[r.errno]!)];
  if (r.allow_when) return [...r.allow_when.flatMap(alternative), stmt(BPF_RET_K, deny)];
  const body: Insn[] = [];
  if (r.deny_arg_mask) {
    body.push(stmt(BPF_LD_W_ABS, offArgLow(r.deny_arg_mask.arg)));
    body.push(jump(BPF_JSET_K, r.deny_arg_mask.mask, 0, 1));
    body.push(stmt(BPF_RET_K, deny));
  }
  if (r.arg_in) {
    const vs = r.arg_in.values;
    body.push(stmt(BPF_LD_W_ABS, offArgLow(r.arg_in.arg)));
    if (r.arg_in.mask !== undefined) body.push(stmt(BPF_ALU_AND_K, r.arg_in.mask));
    // On a match jump over the remaining comparisons and the RET deny.
    vs.forEach((v, i) => body.push(jump(BPF_JEQ_K, v, vs.length - i, 0)));
    body.push(stmt(BPF_RET_K, deny));
  }
  if (r.deny_arg_values) {
    body.push(stmt(BPF_LD_W_ABS, offArgLow(r.deny_arg_values.arg)));
    if (r.deny_arg_values.mask !== undefined) body.push(stmt(BPF_ALU_AND_K, r.deny_arg_values.mask));
    for (const v of r.deny_arg_values.values) {
      body.push(jump(BPF_JEQ_K, v, 0, 1));
      body.push(stmt(BPF_RET_K, deny));
    }
  }
  body.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
  return body;
}

/** Compiles a policy to the raw bytes bwrap expects on its --seccomp fd. */
export function compilePolicy(p: SeccompPolicy): Buffer {
  const deny = SECCOMP_RET_ERRNO | ERRNOS[p.default_errno]!;
  const prog: Insn[] = [
    stmt(BPF_LD_W_ABS, OFF_ARCH),
    jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
    stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
    stmt(BPF_LD_W_ABS, OFF_NR),
    jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
    stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
  ];
  for (const r of p.syscalls) {
    const body = ruleBody(r, deny);
    // A always holds nr when a block starts: blocks only fall through from their JEQ.
    prog.push(jump(BPF_JEQ_K, r.nr, 0, body.length));
    prog.push(...body);
  }
  prog.push(stmt(BPF_RET_K, deny));
  if (prog.length > 4096) throw new PolicyError(`BPF program of ${prog.length} instructions exceeds 4096`);
  const buf = Buffer.alloc(prog.length * 8);
  prog.forEach((ins, i) => {
    buf.writeUInt16LE(ins.code, i * 8);
    buf.writeUInt8(ins.jt, i * 8 + 2);
    buf.writeUInt8(ins.jf, i * 8 + 3);
    buf.writeUInt32LE(ins.k, i * 8 + 4);
  });
  return buf;
}
