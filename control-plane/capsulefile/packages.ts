// Package declarations with optional version pins, in each ecosystem's own
// syntax (docs/CAPSULEFILE.md "packages"), and the comparison of a pin with
// an installed version. Pure: the base image adapter supplies the inventory.
//   apt  name | name=version            (Debian: exact version)
//   pip  name | name<op>version[,<op>version...]   op: == != >= <= > < ~= ===  (PEP 440; == and != take a trailing .*)
//   npm  name | @scope/name | name@version         (exact semver)

export type Ecosystem = 'apt' | 'pip' | 'npm';

/** PEP 503 name normalization, so `Foo_Bar` and `foo-bar` are one pip package. */
export const pep503 = (n: string): string => n.toLowerCase().replace(/[-_.]+/g, '-');

/** The name two declarations of one ecosystem are the same package under. */
export const packageKey = (eco: Ecosystem, name: string): string => (eco === 'pip' ? pep503(name) : name);

export interface Constraint {
  op: string;
  version: string;
}

export interface PackageSpec {
  /** As the ecosystem names it (pip names are compared PEP 503-normalized). */
  name: string;
  constraints: Constraint[];
}

const APT = /^([a-z0-9][a-z0-9+.-]+)(?:=([0-9][A-Za-z0-9.+~:-]*))?$/;
const PIP_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?/;
const PIP_CLAUSE = /^(===|==|!=|>=|<=|~=|>|<)([0-9][A-Za-z0-9.+!_-]*(?:\.\*)?)$/;
const NPM =
  /^((?:@[a-z0-9][a-z0-9._-]*\/)?[a-z0-9][a-z0-9._-]*)(?:@(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?))?$/;

/** The parsed declaration, or a reason it is not valid in the ecosystem's syntax. */
export function parsePackageSpec(eco: Ecosystem, spec: string): PackageSpec | { problem: string } {
  if (eco === 'apt') {
    const m = APT.exec(spec);
    if (!m) return { problem: 'not an apt package ("name" or "name=version")' };
    return { name: m[1]!, constraints: m[2] ? [{ op: '=', version: m[2] }] : [] };
  }
  if (eco === 'npm') {
    const m = NPM.exec(spec);
    if (!m) return { problem: 'not an npm package ("name", "@scope/name" or "name@1.2.3")' };
    return { name: m[1]!, constraints: m[2] ? [{ op: '=', version: m[2] }] : [] };
  }
  const name = PIP_NAME.exec(spec)?.[0];
  if (!name) return { problem: 'not a pip requirement ("name" or "name==1.2", "name>=1.0,<2")' };
  const rest = spec.slice(name.length);
  if (rest === '') return { name, constraints: [] };
  const constraints: Constraint[] = [];
  for (const clause of rest.split(',')) {
    const m = PIP_CLAUSE.exec(clause);
    if (!m || (m[2]!.endsWith('.*') && m[1] !== '==' && m[1] !== '!='))
      return { problem: 'not a pip requirement ("name" or "name==1.2", "name>=1.0,<2")' };
    constraints.push({ op: m[1]!, version: m[2]! });
  }
  return { name, constraints };
}

// PEP 440, reduced to what decides a pin against an installed release:
// release numbers compared numerically, then dev < pre (a < b < rc) < final < post.
interface Pep440 {
  release: number[];
  rank: number;
  n: number;
}
const PHASE: Record<string, number> = { dev: 0, a: 1, alpha: 1, b: 2, beta: 2, c: 3, rc: 3, pre: 3, preview: 3 };

function pep440(v: string): Pep440 | null {
  const m =
    /^v?(?:\d+!)?(\d+(?:\.\d+)*)(?:[-_.]?(dev|a|alpha|b|beta|c|rc|pre|preview|post)[-_.]?(\d*))?(?:\+.*)?$/i.exec(
      v.trim(),
    );
  if (!m) return null;
  const phase = m[2]?.toLowerCase();
  return {
    release: m[1]!.split('.').map(Number),
    rank: phase === undefined ? 4 : phase === 'post' ? 5 : PHASE[phase]!,
    n: Number(m[3] || 0),
  };
}

function cmp(a: Pep440, b: Pep440): number {
  const len = Math.max(a.release.length, b.release.length);
  for (let i = 0; i < len; i++) {
    const d = (a.release[i] ?? 0) - (b.release[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return Math.sign(a.rank - b.rank || a.n - b.n);
}

function pipSatisfies(installed: string, c: Constraint): boolean {
  if (c.op === '===') return installed === c.version;
  if (c.version.endsWith('.*')) {
    const prefix = c.version.slice(0, -2).split('.').map(Number);
    const have = pep440(installed);
    const match = have !== null && prefix.every((p, i) => (have.release[i] ?? 0) === p);
    return c.op === '==' ? match : !match;
  }
  const have = pep440(installed);
  const want = pep440(c.version);
  if (have === null || want === null) return false;
  const d = cmp(have, want);
  switch (c.op) {
    case '==':
      return d === 0;
    case '!=':
      return d !== 0;
    case '>=':
      return d >= 0;
    case '<=':
      return d <= 0;
    case '>':
      return d > 0;
    case '<':
      return d < 0;
    default: {
      // ~= V.N: >= V.N and == V.* (the last release segment may move).
      const prefix = want.release.slice(0, Math.max(1, want.release.length - 1));
      return d >= 0 && prefix.every((p, i) => (have.release[i] ?? 0) === p);
    }
  }
}

/** Whether an installed version satisfies every constraint (apt and npm: exact). */
export function satisfies(eco: Ecosystem, installed: string, constraints: readonly Constraint[]): boolean {
  return constraints.every((c) => (eco === 'pip' ? pipSatisfies(installed, c) : installed === c.version));
}
