// The per-capsule certificate authority. The capsule trusts only this CA (its
// bundle lives in the capsule's tmpfs); the proxy mints one leaf per host the
// capsule CONNECTs to and caches it for the capsule's life.
//
// Keys are ECDSA P-256: a key pair costs well under a millisecond, where the
// RSA-2048 pairs used before took 50-500 ms of CPU each on the control plane's
// thread pool (two per capsule with egress, on the services' CPU share).
//
// Key handling: both private keys (CA and the shared leaf key) exist as DER
// Buffers this module owns; destroy() overwrites them with zeros and reads
// them back. node-forge builds the certificates' ASN.1 (names, extensions);
// the public key and the signature come from node:crypto, so the CA key never
// becomes a JS object.
// WARNING: OpenSSL also holds copies (the signing KeyObject, each TLS
// SecureContext); those are released to the garbage collector, not measured,
// and the evidence says so.
import { createHash, createPrivateKey, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
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
    algorithm: 'ECDSA-P256';
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

interface KeyPair {
  /** PKCS#8 DER of the private key: the copy destroy() zeroizes. */
  der: Buffer;
  /** SubjectPublicKeyInfo DER. */
  spki: Buffer;
}

function ecKeyPair(): KeyPair {
  const { publicKey, privateKey } = generateKeyPairSync('ec', {
    namedCurve: 'P-256',
    publicKeyEncoding: { type: 'spki', format: 'der' },
    privateKeyEncoding: { type: 'pkcs8', format: 'der' },
  });
  return { der: privateKey, spki: publicKey };
}

const asn1 = forge.asn1;
const ECDSA_WITH_SHA256 = '1.2.840.10045.4.3.2';

/** AlgorithmIdentifier ecdsa-with-SHA256: parameters absent (RFC 5758 3.2). */
function ecdsaSha256(): forge.asn1.Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, [
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OID, false, asn1.oidToDer(ECDSA_WITH_SHA256).getBytes()),
  ]);
}

/** Key identifier (RFC 5280 4.2.1.2, method 1): SHA-1 of the subjectPublicKey BIT STRING's bytes, as a byte string. */
function keyIdentifier(spki: Buffer): string {
  const bits = asn1.fromDer(spki.toString('binary')).value[1] as forge.asn1.Asn1;
  const key = Buffer.from((bits.value as string).slice(1), 'binary'); // after the unused-bits octet
  return createHash('sha1').update(key).digest('binary');
}

/** The extension with its value given: forge would derive one from an RSA key. */
function subjectKeyId(id: string): object {
  return { name: 'subjectKeyIdentifier', value: asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OCTETSTRING, false, id) };
}

/**
 * The DER certificate: forge's certificate object gives the names, validity and extensions;
 * the public key is `spki` and the signature is ECDSA P-256 with SHA-256 by `key` (node:crypto).
 */
function signedCertificate(cert: forge.pki.Certificate, spki: Buffer, key: KeyObject): Buffer {
  const { Class, Type } = asn1;
  const time = (d: Date) => asn1.create(Class.UNIVERSAL, Type.UTCTIME, false, asn1.dateToUtcTime(d));
  const tbs = asn1.create(Class.UNIVERSAL, Type.SEQUENCE, true, [
    asn1.create(Class.CONTEXT_SPECIFIC, 0, true, [
      asn1.create(Class.UNIVERSAL, Type.INTEGER, false, asn1.integerToDer(2).getBytes()), // v3
    ]),
    asn1.create(Class.UNIVERSAL, Type.INTEGER, false, forge.util.hexToBytes(cert.serialNumber)),
    ecdsaSha256(),
    forge.pki.distinguishedNameToAsn1(cert.issuer),
    asn1.create(Class.UNIVERSAL, Type.SEQUENCE, true, [time(cert.validity.notBefore), time(cert.validity.notAfter)]),
    forge.pki.distinguishedNameToAsn1(cert.subject),
    asn1.fromDer(spki.toString('binary')),
    // Not in @types/node-forge, but exported by node-forge's x509.js.
    (
      forge.pki as unknown as { certificateExtensionsToAsn1(e: unknown[]): forge.asn1.Asn1 }
    ).certificateExtensionsToAsn1(cert.extensions),
  ]);
  const tbsDer = Buffer.from(asn1.toDer(tbs).getBytes(), 'binary');
  const signature = sign('sha256', tbsDer, key); // DER ECDSA-Sig-Value
  const der = asn1.create(Class.UNIVERSAL, Type.SEQUENCE, true, [
    tbs,
    ecdsaSha256(),
    asn1.create(Class.UNIVERSAL, Type.BITSTRING, false, '\0' + signature.toString('binary')),
  ]);
  return Buffer.from(asn1.toDer(der).getBytes(), 'binary');
}

export class CapsuleCa {
  readonly caPem: string;
  readonly #opts: CaOptions;
  #caDer: Buffer | null;
  #caKey: KeyObject | null;
  /** The CA certificate's DER and its subject and key identifier, which every leaf names as issuer. */
  #caCertDer: Buffer;
  #caSubject: forge.pki.CertificateField[];
  #caKeyId: string;
  #leafDer: Buffer | null;
  #leafPem: Buffer | null;
  #leafSpki: Buffer;
  #contexts = new Map<string, SecureContext>();
  #issued = 0;
  #notBefore: Date;
  #notAfter: Date;

  /** Generates the CA and leaf keys and the CA certificate. */
  static async create(opts: CaOptions): Promise<CapsuleCa> {
    return new CapsuleCa(opts, ecKeyPair(), ecKeyPair());
  }

  private constructor(opts: CaOptions, ca: KeyPair, leaf: KeyPair) {
    this.#opts = opts;
    this.#caDer = ca.der;
    this.#caKey = createPrivateKey({ key: ca.der, format: 'der', type: 'pkcs8' });
    this.#leafDer = leaf.der;
    this.#leafPem = pemBuffer(leaf.der, 'PRIVATE KEY');
    this.#leafSpki = leaf.spki;
    const now = opts.nowMs();
    // Backdated an hour for clock skew inside the capsule.
    this.#notBefore = new Date(now - 3600_000);
    this.#notAfter = new Date(now + opts.validityHours * 3600_000);

    this.#caSubject = [
      { name: 'commonName', value: `Capsule egress CA ${opts.capsuleId}`.slice(0, 64) },
      { name: 'organizationName', value: 'Capsule sealed egress' },
    ];
    this.#caKeyId = keyIdentifier(ca.spki);
    const cert = this.#certificate(this.#caSubject, [
      { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      subjectKeyId(this.#caKeyId),
    ]);
    this.#caCertDer = signedCertificate(cert, ca.spki, this.#caKey);
    this.caPem = pemBuffer(this.#caCertDer, 'CERTIFICATE').toString('latin1');
  }

  /** An unsigned certificate issued by this CA: fresh serial, the CA's validity, `subject`, `extensions`. */
  #certificate(subject: forge.pki.CertificateField[], extensions: object[]): forge.pki.Certificate {
    const cert = forge.pki.createCertificate();
    cert.serialNumber = this.#serial();
    cert.validity.notBefore = this.#notBefore;
    cert.validity.notAfter = this.#notAfter;
    cert.setSubject(subject);
    cert.setIssuer(this.#caSubject);
    cert.setExtensions(extensions);
    return cert;
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
    const cert = this.#certificate(
      [{ name: 'commonName', value: host.slice(0, 64) }],
      [
        { name: 'basicConstraints', cA: false, critical: true },
        { name: 'keyUsage', digitalSignature: true, critical: true },
        { name: 'extKeyUsage', serverAuth: true },
        { name: 'subjectAltName', altNames: [isIp ? { type: 7, ip: host } : { type: 2, value: host }] },
        subjectKeyId(keyIdentifier(this.#leafSpki)),
        { name: 'authorityKeyIdentifier', keyIdentifier: this.#caKeyId },
      ],
    );
    const certPem = pemBuffer(signedCertificate(cert, this.#leafSpki, this.#caKey), 'CERTIFICATE');
    const ctx = tlsContext({ key: this.#leafPem, cert: certPem, minVersion: 'TLSv1.2' });
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
        algorithm: 'ECDSA-P256' as const,
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
    return {
      ca_certificate_sha256: `sha256:${createHash('sha256').update(this.#caCertDer).digest('hex')}`,
      keys,
      leaf_certificates_issued: this.#issued,
      tls_contexts_released: released,
      openssl_copies: 'released_to_garbage_collector_not_measured',
      destroyed_at: destroyedAt,
    };
  }
}
