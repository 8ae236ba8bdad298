// `sha512:<hex>`, the hash form of the trail and the file listings. One definition: the runner
// hashes exec output that the control plane would otherwise hash itself, and both must agree.
import { createHash } from 'node:crypto';

/** SHA-512 of the bytes (a string as UTF-8), as `sha512:<128 hex>`. */
export const sha512Prefixed = (b: Uint8Array | string): string =>
  `sha512:${createHash('sha512').update(b).digest('hex')}`;
