// Descriptor hygiene at start: any fd above stderr the runner inherited
// without close-on-exec would be passed through bwrap into every capsule
// (bwrap keeps inherited fds). Node's own fds are all O_CLOEXEC, so closing
// every non-CLOEXEC fd > 2 removes exactly the inherited ones.
import { closeSync, readdirSync, readFileSync } from 'node:fs';

const O_CLOEXEC = 0o2000000;

export function closeInheritedFds(): number[] {
  const closed: number[] = [];
  for (const name of readdirSync('/proc/self/fd')) {
    const fd = Number(name);
    if (!Number.isInteger(fd) || fd <= 2) continue;
    try {
      const m = /^flags:\s+([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
      if (m && (parseInt(m[1]!, 8) & O_CLOEXEC) === 0) {
        closeSync(fd);
        closed.push(fd);
      }
    } catch {
      /* the readdir fd itself, or already closed */
    }
  }
  return closed;
}
