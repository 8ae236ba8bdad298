// Regenerates the syscall table in docs/SECURITY.md from the policy file and
// the mount table from the sandbox's own argv (tests keep both in sync):
//   npm run build && node scripts/seccomp-doc.mjs
import { readFileSync, writeFileSync } from 'node:fs';
const { loadPolicy } = await import('../dist/sandbox-runner/seccomp.js');
const policy = loadPolicy(new URL('../policies/seccomp-allowlist.yaml', import.meta.url).pathname);
const doc = new URL('../docs/SECURITY.md', import.meta.url);
const rows = policy.syscalls.map((s) => {
  const cond = [
    s.errno ? `refused: ${s.errno}` : s.allow_when ? '' : 'allowed',
    s.deny_arg_mask ? `refused when arg${s.deny_arg_mask.arg} & 0x${s.deny_arg_mask.mask.toString(16)}` : '',
    s.arg_in ? `only arg${s.arg_in.arg} in {${s.arg_in.values.join(', ')}}` : '',
    s.deny_arg_values
      ? `refused when arg${s.deny_arg_values.arg}${s.deny_arg_values.mask ? ` & 0x${s.deny_arg_values.mask.toString(16)}` : ''} in {${s.deny_arg_values.values.map((v) => `0x${v.toString(16)}`).join(', ')}}`
      : '',
    s.allow_when
      ? `allowed only when ${s.allow_when
          .map(
            (alt) =>
              `(${alt
                .map(
                  (c) =>
                    `arg${c.arg}${c.mask ? ` & 0x${c.mask.toString(16)}` : ''} ${c.in ? 'in' : 'not in'} {${(c.in ?? c.not_in).join(', ')}}`,
                )
                .join(' and ')})`,
          )
          .join(' or ')}`
      : '',
  ]
    .filter(Boolean)
    .join('; ');
  return `| \`${s.name}\` | ${s.nr} | ${cond} | ${s.why} |`;
});
const table = [
  '<!-- syscalls:begin -->',
  '| syscall | nr | rule | why |',
  '|---|---|---|---|',
  ...rows,
  '<!-- syscalls:end -->',
].join('\n');
const { documentedMountRows } = await import('../dist/test/helpers/mount-doc.js');
const mounts = [
  '<!-- mounts:begin -->',
  '| inside | bwrap | from |',
  '|---|---|---|',
  ...documentedMountRows(),
  '<!-- mounts:end -->',
].join('\n');
const text = readFileSync(doc, 'utf8');
writeFileSync(
  doc,
  text
    .replace(/<!-- syscalls:begin -->[\s\S]*?<!-- syscalls:end -->/, table)
    .replace(/<!-- mounts:begin -->[\s\S]*?<!-- mounts:end -->/, mounts),
);
console.log(
  `${policy.syscalls.filter((s) => !s.errno).length} allowed, ${policy.syscalls.filter((s) => s.errno).length} refused with a chosen errno`,
);
