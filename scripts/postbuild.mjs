// Marks the CLI entry executable after tsc (tsc does not keep file modes), and
// copies the browser verifier page's static files (HTML, CSS, browser JS) next
// to the compiled HTTP layer that serves them.
import { chmodSync, cpSync, existsSync } from 'node:fs';
const bin = new URL('../dist/cli/capsule.js', import.meta.url);
if (existsSync(bin)) chmodSync(bin, 0o755);
cpSync(
  new URL('../control-plane/http/verify-page/', import.meta.url),
  new URL('../dist/control-plane/http/verify-page/', import.meta.url),
  {
    recursive: true,
  },
);
