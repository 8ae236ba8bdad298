// Which folders may import which (after Tailscale's deptest). Reads the
// TypeScript sources, so a forbidden import fails here before review.
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

function sources(dir: string): string[] {
  const abs = join(root, dir);
  let entries: string[];
  try {
    entries = readdirSync(abs);
  } catch {
    return [];
  }
  return entries.flatMap((name) => {
    const p = join(abs, name);
    if (statSync(p).isDirectory()) return sources(join(dir, name));
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [join(dir, name)] : [];
  });
}

interface Import {
  spec: string;
  target: string | null;
} // target: repo-relative path for relative imports

function imports(file: string): Import[] {
  const text = readFileSync(join(root, file), 'utf8');
  const out: Import[] = [];
  const re =
    /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\n)\s*import\s*['"]([^'"]+)['"]/g;
  for (const m of text.matchAll(re)) {
    const spec = (m[1] ?? m[2] ?? m[3])!;
    const target = spec.startsWith('.')
      ? relative(root, resolve(dirname(join(root, file)), spec))
          .split(sep)
          .join('/')
      : null;
    out.push({ spec, target });
  }
  return out;
}

const top = (p: string) => p.split('/')[0]!;

/** Folders each top-level folder may import from (besides itself). */
const allowed: Record<string, string[]> = {
  shared: [],
  'sandbox-runner': ['shared'],
  'egress-proxy': ['shared'],
  'control-plane': ['shared', 'egress-proxy'],
  cli: ['shared', 'control-plane', 'sandbox-runner', 'egress-proxy', 'clients'],
  // SDKs are their own packages: they may reuse the isomorphic shared code (the proof library) only.
  clients: ['shared'],
};

t.test('top-level folders import only downward', async (t) => {
  for (const [folder, may] of Object.entries(allowed)) {
    for (const file of sources(folder)) {
      for (const imp of imports(file)) {
        if (imp.target === null) continue;
        const dest = top(imp.target);
        if (dest === folder) continue;
        t.ok(may.includes(dest), `${file} imports ${imp.spec}`, { found: dest, allowed: may });
      }
    }
  }
});

t.test('other folders are reached only through their public entry', async (t) => {
  // A folder's public surface: egress-proxy/index.ts; control-plane and the
  // runner expose their entry modules to the CLI only.
  for (const file of sources('control-plane')) {
    for (const imp of imports(file)) {
      if (imp.target?.startsWith('egress-proxy/'))
        t.equal(imp.target, 'egress-proxy/index.js', `${file} -> ${imp.spec}`);
    }
  }
});

t.test('the verifier path is isomorphic: nothing reachable from shared/proof imports a Node module', async (t) => {
  // Walk every relative import reachable from the proof library's modules.
  const seen = new Set<string>();
  const queue = sources('shared/proof');
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const imp of imports(file)) {
      t.notOk(
        imp.spec.startsWith('node:') || ['fs', 'crypto', 'path', 'buffer', 'net'].includes(imp.spec),
        `${file} imports ${imp.spec}`,
      );
      if (imp.target) {
        t.notOk(imp.target.startsWith('shared/node/'), `${file} reaches Node-only ${imp.spec}`);
        queue.push(imp.target.replace(/\.js$/, '.ts'));
      }
    }
  }
  t.ok(seen.size > 1, 'walked the proof library');
});

t.test('control-plane domain has no I/O and depends on no adapter', async (t) => {
  const io = /^(node:|koa|@koa\/|@mikro-orm\/|pg$|pino|prom-client|node-forge)/;
  for (const file of sources('control-plane/domain')) {
    for (const imp of imports(file)) {
      t.notOk(io.test(imp.spec), `${file} imports ${imp.spec}`);
      if (imp.target?.startsWith('control-plane/'))
        t.ok(imp.target.startsWith('control-plane/domain/'), `${file} -> ${imp.spec}`);
    }
  }
});

/** control-plane folders that do I/O (adapters); domain/ and capsulefile/ are pure, service/ only sequences. */
const ADAPTERS = [
  'store',
  'http',
  'runner',
  'egress',
  'secrets',
  'base-image',
  'policy',
  'billing',
  'webhooks',
  'signing',
];

t.test('control-plane adapters do not import each other', async (t) => {
  const adapters = ADAPTERS;
  for (const a of adapters) {
    for (const file of sources(`control-plane/${a}`)) {
      for (const imp of imports(file)) {
        const other = adapters.find((b) => b !== a && imp.target?.startsWith(`control-plane/${b}/`));
        t.notOk(other, `${file} (adapter ${a}) imports adapter ${other}: ${imp.spec}`);
      }
    }
  }
});

t.test('control-plane services depend on ports, never on adapters', async (t) => {
  const files = sources('control-plane/service');
  t.ok(files.length > 0);
  for (const file of files) {
    for (const imp of imports(file)) {
      const adapter = ADAPTERS.find((a) => imp.target?.startsWith(`control-plane/${a}/`));
      t.notOk(adapter, `${file} imports adapter ${adapter}: ${imp.spec}`);
      t.notOk(
        /^(node:(fs|net|http|https|child_process)|koa|@koa\/|@mikro-orm\/|pg$)/.test(imp.spec),
        `${file} imports ${imp.spec}`,
      );
    }
  }
});

t.test('control-plane/capsulefile is domain: no I/O, no adapters', async (t) => {
  const files = sources('control-plane/capsulefile');
  t.ok(files.length > 0);
  for (const file of files) {
    for (const imp of imports(file)) {
      t.notOk(/^(node:|koa|@koa\/|@mikro-orm\/|pg$|pino)/.test(imp.spec), `${file} imports ${imp.spec}`);
      if (imp.target?.startsWith('control-plane/'))
        t.ok(
          imp.target.startsWith('control-plane/capsulefile/') || imp.target.startsWith('control-plane/domain/'),
          `${file} -> ${imp.spec}`,
        );
    }
  }
});

t.test('the CLI reaches the control plane only through control-plane/index.ts', async (t) => {
  for (const file of sources('cli')) {
    for (const imp of imports(file)) {
      if (imp.target?.startsWith('control-plane/'))
        t.equal(imp.target, 'control-plane/index.js', `${file} -> ${imp.spec}`);
    }
  }
});

t.test('only config modules and process entries (main.ts) read process.env', async (t) => {
  const files = ['shared', 'control-plane', 'sandbox-runner', 'egress-proxy', 'cli'].flatMap(sources);
  t.ok(files.length > 0);
  for (const file of files) {
    if (/(^|\/)(config|main)\.ts$/.test(file)) continue; // entries hand env to a config loader
    const text = readFileSync(join(root, file), 'utf8');
    t.notOk(/process\.env\b/.test(text), `${file} reads process.env`);
  }
});
