// Checks a customer's co-signature (docs/PROOF_FORMAT.md "Customer
// co-signatures") with node:crypto: Ed25519, or RSA-PSS with SHA-256 and
// MGF1-SHA-256 at any salt length. Used where signatures arrive (the control
// plane's co-signer) and where they are verified offline (`capsule verify --customer-key`).
import { constants, createPublicKey, verify, type KeyObject } from 'node:crypto';
import type { CustomerAlgorithm } from '../proof/index.js';

/** The key in `pem` (SPKI PEM) and the algorithm it signs with; null when it is neither Ed25519 nor RSA. */
export function customerKey(pem: string | Buffer): { key: KeyObject; algorithm: CustomerAlgorithm } | null {
  try {
    const key = createPublicKey(pem);
    const t = key.asymmetricKeyType;
    if (t === 'ed25519') return { key, algorithm: 'Ed25519' };
    if (t === 'rsa' || t === 'rsa-pss') return { key, algorithm: 'RSA-PSS-SHA256' };
    return null;
  } catch {
    return null;
  }
}

/** False on any mismatch or malformed input, never a throw. */
export function verifyCustomerSignature(
  algorithm: CustomerAlgorithm,
  key: KeyObject,
  message: Uint8Array,
  signature: Uint8Array,
): boolean {
  try {
    if (algorithm === 'Ed25519') return key.asymmetricKeyType === 'ed25519' && verify(null, message, key, signature);
    if (key.asymmetricKeyType !== 'rsa' && key.asymmetricKeyType !== 'rsa-pss') return false;
    return verify(
      'sha256',
      message,
      { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_AUTO },
      signature,
    );
  } catch {
    return false;
  }
}
