// The sandbox's mount list as docs/SECURITY.md shows it: sandboxArgv for a
// capsule with app files and egress, over an image laid out like Debian 12
// (merged /usr: /bin, /sbin, /lib, /lib64 are symlinks into /usr), with
// placeholders for the per-capsule host paths (and the tenant's private copies). Used by the doc-sync test and
// by scripts/seccomp-doc.mjs, which writes the table.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { PRIVATE_FILES } from '../../sandbox-runner/private-copies.js';
import { sandboxArgv, sandboxMounts } from '../../sandbox-runner/sandbox.js';

export function documentedMountRows(): string[] {
  const root = mkdtempSync(join(tmpdir(), 'capsule-image-'));
  try {
    mkdirSync(join(root, 'usr'));
    for (const top of ['bin', 'sbin', 'lib', 'lib64']) symlinkSync(`usr/${top}`, join(root, top));
    const argv = sandboxArgv({
      tmpfsDir: '<capsule tmpfs>',
      imageRoot: root,
      etcDir: '<runner state>/etc',
      hostUid: 100000,
      hostname: 'capsule-000000000000',
      hasApp: true,
      netnsPath: '<capsule netns>',
      caFile: '<capsule tmpfs>/egress-ca.pem',
      // An x86-64 image: its loader, libc and shell, copied for the tenant (private-copies.ts).
      privateFiles: PRIVATE_FILES.filter((f) => !f.includes('aarch64')).map((f) => [
        `<tenant copies>/${basename(f)}`,
        f,
      ]),
    });
    return sandboxMounts(argv).map(
      (m) => `| \`${m.dest}\` | ${m.kind} | ${m.source ? `\`${m.source.replace(root, '<image>')}\`` : ''} |`,
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
