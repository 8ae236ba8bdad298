// The base image capsules run on is the host's read-only system prefix. This
// adapter answers "which declared packages are not satisfied" from what is
// installed there, with versions, read once on first use: Debian's dpkg
// database (apt), the system Python's installed distributions (pip), global
// node_modules (npm). Nothing is ever downloaded or installed.
import { execFile } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import {
  packageKey,
  parsePackageSpec,
  pep503,
  satisfies,
  type BaseImage,
  type Ecosystem,
} from '../capsulefile/index.js';

/** Installed name (ecosystem key) -> version; null when the version could not be read. */
type Inventory = Map<string, string | null>;

export interface HostBaseImageOptions {
  dpkgStatus?: string;
  python?: string;
  nodeModules?: string[];
}

async function aptPackages(statusFile: string): Promise<Inventory> {
  const out: Inventory = new Map();
  let text: string;
  try {
    text = await readFile(statusFile, 'utf8');
  } catch {
    return out;
  }
  for (const block of text.split(/\n\s*\n/)) {
    const name = /^Package:\s*(\S+)/m.exec(block)?.[1];
    if (name && /^Status:.*\binstalled$/m.test(block)) out.set(name, /^Version:\s*(\S+)/m.exec(block)?.[1] ?? null);
  }
  return out;
}

function pipPackages(python: string): Promise<Inventory> {
  const script =
    'import importlib.metadata as m, json; print(json.dumps([[d.metadata["Name"] or "", d.version] for d in m.distributions()]))';
  return new Promise((resolve) => {
    execFile(python, ['-I', '-c', script], { timeout: 15_000, maxBuffer: 4 * 1024 * 1024 }, (err, stdout) => {
      if (err) return resolve(new Map());
      try {
        const rows = JSON.parse(stdout) as [string, string | null][];
        resolve(new Map(rows.map(([n, v]) => [pep503(n), typeof v === 'string' ? v : null])));
      } catch {
        resolve(new Map());
      }
    });
  });
}

async function npmVersion(dir: string): Promise<string | null> {
  try {
    const v = (JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as { version?: unknown }).version;
    return typeof v === 'string' ? v : null;
  } catch {
    return null;
  }
}

async function npmPackages(dirs: string[]): Promise<Inventory> {
  const out: Inventory = new Map();
  for (const dir of dirs) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    for (const n of names) {
      if (n.startsWith('@')) {
        try {
          for (const s of await readdir(join(dir, n))) out.set(`${n}/${s}`, await npmVersion(join(dir, n, s)));
        } catch {
          /* not a directory */
        }
      } else if (!n.startsWith('.')) {
        out.set(n, await npmVersion(join(dir, n)));
      }
    }
  }
  return out;
}

export class HostBaseImage implements BaseImage {
  private inventory: Promise<Record<Ecosystem, Inventory>> | null = null;
  constructor(private readonly opts: HostBaseImageOptions = {}) {}

  private load(): Promise<Record<Ecosystem, Inventory>> {
    this.inventory ??= (async () => ({
      apt: await aptPackages(this.opts.dpkgStatus ?? '/var/lib/dpkg/status'),
      pip: await pipPackages(this.opts.python ?? '/usr/bin/python3'),
      npm: await npmPackages(this.opts.nodeModules ?? ['/usr/lib/node_modules', '/usr/local/lib/node_modules']),
    }))();
    return this.inventory;
  }

  async unmetPackages(packages: Readonly<Partial<Record<string, readonly string[]>>>): Promise<string[]> {
    const entries = Object.entries(packages).filter(([, names]) => names && names.length > 0);
    if (entries.length === 0) return [];
    const inv = await this.load();
    const unmet: string[] = [];
    for (const [eco, specs] of entries as [Ecosystem, readonly string[]][]) {
      for (const entry of specs) {
        const spec = parsePackageSpec(eco, entry);
        const installed = 'problem' in spec ? undefined : inv[eco]?.get(packageKey(eco, spec.name));
        if (installed === undefined || 'problem' in spec) unmet.push(`${eco}:${entry}`);
        // A version that cannot be read is taken as satisfying the pin (presence is what was checked).
        else if (installed !== null && !satisfies(eco, installed, spec.constraints))
          unmet.push(`${eco}:${entry} (installed ${installed})`);
      }
    }
    return unmet;
  }
}
