// The base image capsules run on is the host's read-only system prefix. This
// adapter answers "which declared packages are missing" from what is installed
// there, read once on first use: Debian's dpkg database (apt), the system
// Python's installed distributions (pip), global node_modules (npm).
// Nothing is ever downloaded or installed.
import { execFile } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { BaseImage } from '../capsulefile/index.js';

export interface HostBaseImageOptions {
  dpkgStatus?: string;
  python?: string;
  nodeModules?: string[];
}

/** PEP 503 name normalization, so `Foo_Bar` and `foo-bar` are one package. */
const pep503 = (n: string): string => n.toLowerCase().replace(/[-_.]+/g, '-');

async function aptPackages(statusFile: string): Promise<Set<string>> {
  const out = new Set<string>();
  let text: string;
  try {
    text = await readFile(statusFile, 'utf8');
  } catch {
    return out;
  }
  for (const block of text.split(/\n\s*\n/)) {
    const name = /^Package:\s*(\S+)/m.exec(block)?.[1];
    if (name && /^Status:.*\binstalled$/m.test(block)) out.add(name);
  }
  return out;
}

function pipPackages(python: string): Promise<Set<string>> {
  const script =
    'import importlib.metadata as m, json; print(json.dumps([d.metadata["Name"] or "" for d in m.distributions()]))';
  return new Promise((resolve) => {
    execFile(python, ['-I', '-c', script], { timeout: 15_000, maxBuffer: 4 * 1024 * 1024 }, (err, stdout) => {
      if (err) return resolve(new Set());
      try {
        resolve(new Set((JSON.parse(stdout) as string[]).map(pep503)));
      } catch {
        resolve(new Set());
      }
    });
  });
}

async function npmPackages(dirs: string[]): Promise<Set<string>> {
  const out = new Set<string>();
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
          for (const s of await readdir(join(dir, n))) out.add(`${n}/${s}`);
        } catch {
          /* not a directory */
        }
      } else if (!n.startsWith('.')) {
        out.add(n);
      }
    }
  }
  return out;
}

export class HostBaseImage implements BaseImage {
  private inventory: Promise<Record<string, Set<string>>> | null = null;
  constructor(private readonly opts: HostBaseImageOptions = {}) {}

  private load(): Promise<Record<string, Set<string>>> {
    this.inventory ??= (async () => ({
      apt: await aptPackages(this.opts.dpkgStatus ?? '/var/lib/dpkg/status'),
      pip: await pipPackages(this.opts.python ?? '/usr/bin/python3'),
      npm: await npmPackages(this.opts.nodeModules ?? ['/usr/lib/node_modules', '/usr/local/lib/node_modules']),
    }))();
    return this.inventory;
  }

  async missingPackages(packages: Readonly<Partial<Record<string, readonly string[]>>>): Promise<string[]> {
    const entries = Object.entries(packages).filter(([, names]) => names && names.length > 0);
    if (entries.length === 0) return [];
    const inv = await this.load();
    const missing: string[] = [];
    for (const [eco, names] of entries) {
      const have = inv[eco] ?? new Set<string>();
      for (const n of names ?? []) if (!have.has(eco === 'pip' ? pep503(n) : n)) missing.push(`${eco}:${n}`);
    }
    return missing;
  }
}
