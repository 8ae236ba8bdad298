// Active swap areas (SPEC §11: a capsule node refuses to start with swap on,
// since capsule memory could otherwise reach disk). Shared by `capsule serve`
// and the sandbox runner, which both check at start.
import { readFileSync } from 'node:fs';

export const PROC_SWAPS = '/proc/swaps';

/**
 * The swap areas listed in a /proc/swaps-format file: a header line, then one
 * area per line, its name first (spaces escaped as \040). [] when the file
 * does not exist: a kernel built without swap support has none.
 */
export function activeSwaps(path: string = PROC_SWAPS): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' && path === PROC_SWAPS) return [];
    throw e;
  }
  return text
    .split('\n')
    .slice(1)
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((name) => name !== '')
    .map((name) => name.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
}

/** The one-line refusal both processes print. */
export function swapRefusal(areas: string[]): string {
  return `swap is active (${areas.join(', ')}): capsule memory could reach disk; disable it with \`swapoff -a\` (and remove it from /etc/fstab) before starting`;
}
