// A small classic-BPF interpreter for seccomp programs, so the compiled
// allowlist can be checked on any machine without root or a kernel filter
// (the idea of runc's patchbpf tests, which run their filters in a BPF VM).
// It implements the instructions the kernel's seccomp checker accepts and
// applies the same structural checks (length, forward in-range jumps,
// aligned loads inside struct seccomp_data, a RET at the end).

export const RET_KILL_PROCESS = 0x80000000;
export const RET_KILL_THREAD = 0x00000000;
export const RET_TRAP = 0x00030000;
export const RET_ERRNO = 0x00050000;
export const RET_ALLOW = 0x7fff0000;
export const AUDIT_ARCH_X86_64 = 0xc000003e;
export const AUDIT_ARCH_I386 = 0x40000003;
export const X32_SYSCALL_BIT = 0x40000000;

export interface Insn {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

/** struct seccomp_data: the input of a seccomp program. */
export interface SeccompData {
  nr: number;
  arch?: number;
  ip?: bigint;
  /** Up to six 64-bit arguments. */
  args?: (number | bigint)[];
}

export function decode(buf: Buffer): Insn[] {
  if (buf.length % 8 !== 0) throw new Error('program length is not a multiple of 8');
  const out: Insn[] = [];
  for (let i = 0; i < buf.length; i += 8)
    out.push({ code: buf.readUInt16LE(i), jt: buf[i + 2]!, jf: buf[i + 3]!, k: buf.readUInt32LE(i + 4) });
  return out;
}

const SIZEOF_SECCOMP_DATA = 64;

// Opcodes (linux/filter.h): class | size | mode, class | op | src.
const LD_W_ABS = 0x20;
const LD_W_LEN = 0x80;
const LD_IMM = 0x00;
const LDX_IMM = 0x01;
const LDX_W_LEN = 0x81;
const LD_MEM = 0x60;
const LDX_MEM = 0x61;
const ST = 0x02;
const STX = 0x03;
const RET_K = 0x06;
const RET_A = 0x16;
const MISC_TAX = 0x07;
const MISC_TXA = 0x87;
const JMP_JA = 0x05;
const ALU_NEG = 0x84;

/** Kernel-style static checks (seccomp_check_filter + bpf_check_classic); throws on a program the kernel would refuse. */
export function check(prog: Insn[]): void {
  if (prog.length === 0 || prog.length > 4096) throw new Error(`program length ${prog.length} not in 1..4096`);
  prog.forEach((ins, pc) => {
    const cls = ins.code & 0x07;
    if (ins.code === LD_W_ABS && (ins.k % 4 !== 0 || ins.k >= SIZEOF_SECCOMP_DATA))
      throw new Error(`pc ${pc}: load at offset ${ins.k} outside struct seccomp_data or unaligned`);
    if ((ins.code === LD_MEM || ins.code === LDX_MEM || ins.code === ST || ins.code === STX) && ins.k >= 16)
      throw new Error(`pc ${pc}: scratch memory index ${ins.k}`);
    if (cls === 0x05) {
      const op = ins.code & 0xf0;
      if (ins.code === JMP_JA) {
        if (pc + 1 + ins.k >= prog.length) throw new Error(`pc ${pc}: JA out of range`);
      } else if (![0x10, 0x20, 0x30, 0x40].includes(op)) {
        throw new Error(`pc ${pc}: unknown jump ${ins.code.toString(16)}`);
      } else if (pc + 1 + Math.max(ins.jt, ins.jf) >= prog.length) {
        throw new Error(`pc ${pc}: jump out of range`);
      }
    } else if (cls === 0x04) {
      const op = ins.code & 0xf0;
      if (ins.code !== ALU_NEG && ![0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x90, 0xa0].includes(op))
        throw new Error(`pc ${pc}: unknown ALU op ${ins.code.toString(16)}`);
      if ((ins.code & 0x08) === 0 && (op === 0x30 || op === 0x90) && ins.k === 0)
        throw new Error(`pc ${pc}: division by constant 0`);
    } else if (
      ![
        LD_W_ABS,
        LD_W_LEN,
        LD_IMM,
        LDX_IMM,
        LDX_W_LEN,
        LD_MEM,
        LDX_MEM,
        ST,
        STX,
        RET_K,
        RET_A,
        MISC_TAX,
        MISC_TXA,
      ].includes(ins.code)
    ) {
      throw new Error(`pc ${pc}: opcode 0x${ins.code.toString(16)} not allowed in a seccomp filter`);
    }
  });
  const last = prog[prog.length - 1]!;
  if (last.code !== RET_K && last.code !== RET_A) throw new Error('program does not end in RET');
}

function dataWord(d: SeccompData, off: number): number {
  if (off === 0) return d.nr >>> 0;
  if (off === 4) return (d.arch ?? AUDIT_ARCH_X86_64) >>> 0;
  const u64 = (v: number | bigint | undefined): bigint => BigInt.asUintN(64, BigInt(v ?? 0));
  const v = off < 16 ? u64(d.ip) : u64(d.args?.[Math.floor((off - 16) / 8)]);
  // Little-endian: the low word first.
  return Number(off % 8 === 0 ? v & 0xffffffffn : v >> 32n);
}

/** Runs the program on one seccomp_data and returns the 32-bit action value. */
export function run(prog: Insn[], d: SeccompData): number {
  let a = 0;
  let x = 0;
  const mem = new Array<number>(16).fill(0);
  for (let pc = 0, steps = 0; pc < prog.length; pc++, steps++) {
    if (steps > prog.length) throw new Error('no progress (backward jump?)');
    const ins = prog[pc]!;
    const cls = ins.code & 0x07;
    switch (ins.code) {
      case LD_W_ABS:
        a = dataWord(d, ins.k);
        continue;
      case LD_W_LEN:
        a = SIZEOF_SECCOMP_DATA;
        continue;
      case LDX_W_LEN:
        x = SIZEOF_SECCOMP_DATA;
        continue;
      case LD_IMM:
        a = ins.k;
        continue;
      case LDX_IMM:
        x = ins.k;
        continue;
      case LD_MEM:
        a = mem[ins.k]!;
        continue;
      case LDX_MEM:
        x = mem[ins.k]!;
        continue;
      case ST:
        mem[ins.k] = a;
        continue;
      case STX:
        mem[ins.k] = x;
        continue;
      case RET_K:
        return ins.k >>> 0;
      case RET_A:
        return a >>> 0;
      case MISC_TAX:
        x = a;
        continue;
      case MISC_TXA:
        a = x;
        continue;
      case JMP_JA:
        pc += ins.k;
        continue;
    }
    const src = ins.code & 0x08 ? x : ins.k;
    if (cls === 0x04) {
      a = alu(ins.code & 0xf0, a >>> 0, src >>> 0) >>> 0;
      continue;
    }
    if (cls === 0x05) {
      const op = ins.code & 0xf0;
      const A = a >>> 0;
      const S = src >>> 0;
      const taken = op === 0x10 ? A === S : op === 0x20 ? A > S : op === 0x30 ? A >= S : (A & S) !== 0;
      pc += taken ? ins.jt : ins.jf;
      continue;
    }
    throw new Error(`pc ${pc}: opcode 0x${ins.code.toString(16)}`);
  }
  throw new Error('fell off the end of the program');
}

function alu(op: number, a: number, s: number): number {
  switch (op) {
    case 0x00:
      return a + s;
    case 0x10:
      return a - s;
    case 0x20:
      return Math.imul(a, s);
    case 0x30:
      return Math.floor(a / s);
    case 0x40:
      return a | s;
    case 0x50:
      return a & s;
    case 0x60:
      return s >= 32 ? 0 : a << s;
    case 0x70:
      return s >= 32 ? 0 : a >>> s;
    case 0x80:
      return -a;
    case 0x90:
      return a % s;
    case 0xa0:
      return a ^ s;
  }
  throw new Error(`ALU op 0x${op.toString(16)}`);
}

/** Human-readable action, for test messages. */
export function actionName(v: number): string {
  if (v === RET_ALLOW) return 'ALLOW';
  if (v === RET_KILL_PROCESS) return 'KILL_PROCESS';
  if ((v & 0xffff0000) === RET_ERRNO) return `ERRNO(${v & 0xffff})`;
  return `0x${v.toString(16)}`;
}
