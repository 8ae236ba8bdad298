// The browser verifier page (`{verify_url}` = /verify): static HTML, CSS and
// ES modules. The page's modules are the compiled proof library (dist/shared)
// and its two @noble packages, collected once at start by following their
// imports from shared/proof/index.js, with bare
// `@noble/...` specifiers rewritten to the served paths. Nothing is fetched
// from elsewhere, so the page keeps working with the network cut once loaded.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const VERIFY_ASSET_PREFIX = '/verify/assets/';

export interface Asset {
  type: string;
  body: string;
}

/** dist/ (this file is dist/control-plane/http/verify-assets.js). */
const DIST = fileURLToPath(new URL('../../', import.meta.url));
const PAGE_DIR = fileURLToPath(new URL('./verify-page/', import.meta.url));

function nodeModules(): string {
  for (let d = DIST; ; d = dirname(d)) {
    if (existsSync(join(d, 'node_modules/@noble/ed25519'))) return join(d, 'node_modules');
    if (dirname(d) === d) throw new Error('verify page: @noble packages not found');
  }
}

const IMPORT_RE = /(\bfrom\s*|\bimport\s*\(?\s*)(['"])([^'"]+)\2/g;

/** Every asset of the page, by served path. Throws at start if a module is missing. */
export function collectVerifyAssets(): Map<string, Asset> {
  const nm = nodeModules();
  const assets = new Map<string, Asset>();
  const served = (file: string): string => {
    const n = normalize(file);
    if (n.startsWith(DIST)) return VERIFY_ASSET_PREFIX + relative(DIST, n).split(sep).join('/');
    if (n.startsWith(join(nm, '@noble')))
      return VERIFY_ASSET_PREFIX + 'noble/' + relative(join(nm, '@noble'), n).split(sep).join('/');
    throw new Error(`verify page: ${file} is outside the served trees`);
  };
  const queue = [join(DIST, 'shared/proof/index.js')];
  while (queue.length) {
    const file = queue.pop()!;
    const path = served(file);
    if (assets.has(path)) continue;
    const text = readFileSync(file, 'utf8')
      .replace(/\n\/\/# sourceMappingURL=.*$/, '')
      .replace(IMPORT_RE, (m, head: string, q: string, spec: string) => {
        let target: string;
        if (spec.startsWith('.')) target = join(dirname(file), spec);
        else if (spec.startsWith('@noble/')) {
          const [, pkg, ...rest] = spec.split('/');
          target = join(nm, '@noble', pkg!, rest.length ? rest.join('/') : 'index.js');
        } else throw new Error(`verify page: ${file} imports ${spec}, which a browser cannot load`);
        queue.push(target);
        return `${head}${q}${served(target)}${q}`;
      });
    assets.set(path, { type: 'text/javascript; charset=utf-8', body: text });
  }
  for (const [name, type] of [
    ['verify.js', 'text/javascript; charset=utf-8'],
    ['verify.css', 'text/css; charset=utf-8'],
  ] as const)
    assets.set(VERIFY_ASSET_PREFIX + name, { type, body: readFileSync(join(PAGE_DIR, name), 'utf8') });
  assets.set('/verify', { type: 'text/html; charset=utf-8', body: readFileSync(join(PAGE_DIR, 'index.html'), 'utf8') });
  return assets;
}

/** The page's own policy: scripts, styles and fetches from this origin only; no inline code, no framing. */
export const VERIFY_PAGE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
