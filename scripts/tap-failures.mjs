// Runs one tap command (its arguments are this script's), passing its TAP
// output through unchanged, and prints the failing tests by their full
// subtest path last, with tap's exit code: a CI log is read from its tail,
// where tap itself only prints the counts.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const MAX_LISTED = 40;
const child = spawn('tap', process.argv.slice(2), { stdio: ['inherit', 'pipe', 'inherit'] });
const names = []; // the open subtests' names, by nesting level
const failed = [];
const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
lines.on('line', (line) => {
  process.stdout.write(`${line}\n`);
  const m = /^( *)(# Subtest: (.*)|not ok \d+ - (.*))$/.exec(line);
  if (!m) return;
  const level = m[1].length / 4;
  if (m[3] !== undefined) {
    names.length = level;
    names[level] = m[3];
    return;
  }
  // A subtest's own "not ok" repeats at its parent's level: only the innermost failures are listed.
  const path = [...names.slice(0, level), m[4].replace(/ # time=\S+$/, '')].join(' > ');
  if (!failed.some((f) => f.startsWith(`${path} > `))) failed.push(path);
});
child.on('close', (code, signal) => {
  if (failed.length > 0) {
    process.stdout.write(`\n# failing tests (${failed.length}):\n`);
    for (const f of failed.slice(0, MAX_LISTED)) process.stdout.write(`#   ${f}\n`);
    if (failed.length > MAX_LISTED) process.stdout.write(`#   ... and ${failed.length - MAX_LISTED} more\n`);
  }
  process.exitCode = code ?? (signal ? 1 : 0);
});
