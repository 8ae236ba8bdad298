// Copies the proof library's two audited crypto packages (@noble/ed25519,
// @noble/hashes: pure JavaScript, no dependencies of their own) into
// dist/node_modules, so the built SDK needs nothing installed beside it.
import { cpSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../node_modules/', import.meta.url));
for (const name of ['@noble/ed25519', '@noble/hashes']) {
  const dir = join(root, name);
  if (!existsSync(dir)) throw new Error(`${name} not found under ${root}`);
  cpSync(dir, join('dist/node_modules', name), { recursive: true });
}
