// The per-capsule certificate authority. The capsule trusts only this CA (its
// bundle lives in the capsule's tmpfs); the proxy mints one leaf per host the
// capsule CONNECTs to and caches it for the capsule's life.
//
// Key handling: both private keys (CA and the shared leaf key) exist as DER
// Buffers this module owns; destroy() overwrites them with zeros and reads
// them back. node-forge builds the certificates, but signing is delegated to
// node:crypto so the CA key never becomes a forge (JS BigInteger) object.
// WARNING: OpenSSL also holds copies (the signing KeyObject, each TLS
// SecureContext); those are released to the garbage collector, not measured,
// and the evidence says so.
import { createHash, createPrivateKey, generateKeyPair, sign, type KeyObject } from 'node:crypto';
import { createSecureContext as tlsContext, type SecureContext } from 'node:tls';
import forge from 'node-forge';

export interface CaOptions {
  capsuleId: string;
  /** Injected randomness (serial numbers). */
  random: (n: number) => Uint8Array;
  /** Injected wall clock, epoch ms. */
  nowMs: () => number;
  validityHours: number;
}

/** What stop() destroyed, for destruction chain step 4 (key destruction). States only what was done and measured. */
export interface KeyDestructionEvidence {
  ca_certificate_sha256: string;
  keys: {
    role: 'egress_ca' | 'egress_leaf';
    algorithm: 'RSA-2048';
    der_bytes: number;
    overwrite: 'zeros';
    readback_all_zero: boolean;
  }[];
  leaf_certificates_issued: number;
  tls_contexts_released: number;
  openssl_copies: 'released_to_garbage_collector_not_measured';
  destroyed_at: string;
}

const b64Table = Buffer.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/');

/** PEM-encodes DER into a Buffer without creating a JS string (strings cannot be zeroized). */
function pemBuffer(der: Buffer, label: string): Buffer {
  const head = Buffer.from(`-----BEGIN ${label}-----\n`);
  const tail = Buffer.from(`-----END ${label}-----\n`);
  const b64Len = Math.ceil(der.length / 3) * 4;
  const out = Buffer.alloc(head.length + b64Len + Math.ceil(b64Len / 64) + tail.length);
  let o = head.copy(out, 0);
  let col = 0;
  const put = (c: number) => {
    out[o++] = c;
    if (++col === 64) {
      out[o++] = 0x0a;
      col = 0;
    }
  };
  for (let i = 0; i < der.length; i += 3) {
    const a = der[i] as number,
      b = der[i + 1] ?? 0,
      c = der[i + 2] ?? 0;
    const n = (a << 16) | (b << 8) | c;
    put(b64Table[(n >> 18) & 63] as number);
    put(b64Table[(n >> 12) & 63] as number);
    put(i + 1 < der.length ? (b64Table[(n >> 6) & 63] as number) : 0x3d);
    put(i + 2 < der.length ? (b64Table[n & 63] as number) : 0x3d);
  }
  if (col !== 0) out[o++] = 0x0a;
  o += tail.copy(out, o);
  return out.subarray(0, o);
}

interface RsaKeyPair {
  der: Buffer;
  publicPem: string;
}

/** RSA-2048 generated on libuv's thread pool: the API process's event loop keeps serving meanwhile. */
function rsaKeyPair(): Promise<RsaKeyPair> {
  return new Promise((resolve, reject) =>
    generateKeyPair(
      'rsa',
      {
        modulusLength: 2048,
        publicKeyEncoding: { type: 'spki', format: 'pem' },
        privateKeyEncoding: { type: 'pkcs8', format: 'der' },
      },
      (err, publicPem, der) => (err ? reject(err) : resolve({ der, publicPem })),
    ),
  );
}

/** forge "signer": forge hands us the md it fed the TBS bytes into; we sign those bytes natively. */
function nativeSigner(key: KeyObject) {
  let tbs = '';
  const md = {
    algorithm: 'sha256',
    update(bytes: string) {
      tbs += bytes;
      return md;
    },
  };
  return {
    md: md as unknown as forge.md.MessageDigest,
    key: {
      sign: () => sign('sha256', Buffer.from(tbs, 'binary'), key).toString('binary'),
    } as unknown as forge.pki.rsa.PrivateKey,
  };
}

export class CapsuleCa {
  readonly caPem: string;
  readonly #opts: CaOptions;
  #caDer: Buffer | null;
  #caKey: KeyObject | null;
  #caCert: forge.pki.Certificate;
  #caSki: string;
  #leafDer: Buffer | null;
  #leafPem: Buffer | null;
  #leafPublic: forge.pki.PublicKey;
  #contexts = new Map<string, SecureContext>();
  #issued = 0;
  #notBefore: Date;
  #notAfter: Date;

  /** Generates the CA and leaf keys (in parallel, off the event loop) and the CA certificate. */
  static async create(opts: CaOptions): Promise<CapsuleCa> {
    const [ca, leaf] = await Promise.all([rsaKeyPair(), rsaKeyPair()]);
    return new CapsuleCa(opts, ca, leaf);
  }

  private constructor(opts: CaOptions, ca: RsaKeyPair, leaf: RsaKeyPair) {
    this.#opts = opts;
    this.#caDer = ca.der;
    this.#caKey = createPrivateKey({ key: ca.der, format: 'der', type: 'pkcs8' });
    this.#leafDer = leaf.der;
    this.#leafPem = pemBuffer(leaf.der, 'PRIVATE KEY');
    this.#leafPublic = forge.pki.publicKeyFromPem(leaf.publicPem);
    const now = opts.nowMs();
    // Backdated an hour for clock skew inside the capsule.
    this.#notBefore = new Date(now - 3600_000);
    this.#notAfter = new Date(now + opts.validityHours * 3600_000);

    const cert = forge.pki.createCertificate();
    cert.publicKey = forge.pki.publicKeyFromPem(ca.publicPem);
    cert.serialNumber = this.#serial();
    cert.validity.notBefore = this.#notBefore;
    cert.validity.notAfter = this.#notAfter;
    const name = [
      { name: 'commonName', value: `Capsule egress CA ${opts.capsuleId}`.slice(0, 64) },
      { name: 'organizationName', value: 'Capsule sealed egress' },
    ];
    cert.setSubject(name);
    cert.setIssuer(name);
    cert.setExtensions([
      { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      { name: 'subjectKeyIdentifier' },
    ]);
    const s = nativeSigner(this.#caKey);
    cert.sign(s.key, s.md);
    this.#caCert = cert;
    this.#caSki = cert.generateSubjectKeyIdentifier().getBytes();
    this.caPem = forge.pki.certificateToPem(cert);
  }

  #serial(): string {
    const r = Buffer.from(this.#opts.random(16));
    r[0] = (r[0] as number) & 0x7f; // positive INTEGER
    if (r[0] === 0) r[0] = 1;
    return r.toString('hex');
  }

  get destroyed(): boolean {
    return this.#caKey === null;
  }

  /** TLS context presenting a leaf for `host` (hostname or IP literal); minted once per host. */
  contextFor(host: string, isIp: boolean): SecureContext {
    const cached = this.#contexts.get(host);
    if (cached) return cached;
    if (!this.#caKey || !this.#leafPem) throw new Error('egress CA destroyed');
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.#leafPublic;
    cert.serialNumber = this.#serial();
    cert.validity.notBefore = this.#notBefore;
    cert.validity.notAfter = this.#notAfter;
    cert.setSubject([{ name: 'commonName', value: host.slice(0, 64) }]);
    cert.setIssuer(this.#caCert.subject.attributes);
    cert.setExtensions([
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [isIp ? { type: 7, ip: host } : { type: 2, value: host }] },
      { name: 'subjectKeyIdentifier' },
      { name: 'authorityKeyIdentifier', keyIdentifier: this.#caSki },
    ]);
    const s = nativeSigner(this.#caKey);
    cert.sign(s.key, s.md);
    const ctx = tlsContext({ key: this.#leafPem, cert: forge.pki.certificateToPem(cert), minVersion: 'TLSv1.2' });
    this.#contexts.set(host, ctx);
    this.#issued++;
    return ctx;
  }

  /**
   * Overwrites both private keys with zeros, reads them back, drops every reference.
   * Safe to call twice, but a second call finds no key and reports der_bytes 0 and
   * readback_all_zero false: keep the first call's evidence (stop() memoizes it).
   */
  destroy(destroyedAt: string): KeyDestructionEvidence {
    const wipe = (role: 'egress_ca' | 'egress_leaf', buf: Buffer | null) => {
      const n = buf?.length ?? 0;
      buf?.fill(0);
      return {
        role,
        algorithm: 'RSA-2048' as const,
        der_bytes: n,
        overwrite: 'zeros' as const,
        readback_all_zero: buf !== null && buf.every((b) => b === 0),
      };
    };
    const keys = [wipe('egress_ca', this.#caDer), wipe('egress_leaf', this.#leafDer)];
    this.#leafPem?.fill(0);
    const released = this.#contexts.size;
    this.#contexts.clear();
    this.#caDer = null;
    this.#leafDer = null;
    this.#leafPem = null;
    this.#caKey = null;
    const der = Buffer.from(forge.asn1.toDer(forge.pki.certificateToAsn1(this.#caCert)).getBytes(), 'binary');
    return {
      ca_certificate_sha256: `sha256:${createHash('sha256').update(der).digest('hex')}`,
      keys,
      leaf_certificates_issued: this.#issued,
      tls_contexts_released: released,
      openssl_copies: 'released_to_garbage_collector_not_measured',
      destroyed_at: destroyedAt,
    };
  }
}
