// The baseline of the sandbox benchmarks: a bare `bwrap ... /bin/true` (all
// namespaces, /usr read-only, /proc, /dev), spawned from the bench process, so
// that runner and API figures can be read as ratios measured in the same run.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';

export function runProc(file: string, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const p = spawn(file, args, { stdio: 'ignore' });
    p.on('error', reject);
    p.on('exit', (code) => resolve(code ?? -1));
  });
}

export const BARE = [
  '--unshare-all',
  '--die-with-parent',
  '--new-session',
  '--ro-bind',
  '/usr',
  '/usr',
  '--symlink',
  'usr/bin',
  '/bin',
  '--symlink',
  'usr/lib',
  '/lib',
  '--symlink',
  'usr/lib64',
  '/lib64',
  '--proc',
  '/proc',
  '--dev',
  '/dev',
  '--',
  '/bin/true',
];

/** Times `runs` bare bwrap starts (after `warmup` unmeasured ones), in milliseconds each. */
export async function bareBwrapMs(runs: number, warmup = 10): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await runProc('bwrap', BARE);
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await runProc('bwrap', BARE);
    out.push(performance.now() - t0);
  }
  return out;
}
