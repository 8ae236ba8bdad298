// CapsuleClient: every endpoint of the service over the platform's fetch
// (Node >= 20, browsers). Retries network errors, 429 and 5xx with
// exponential backoff and full jitter (default 4 retries, 30 s cap),
// honouring Retry-After; the POSTs the service replays by Idempotency-Key get
// one key per logical call, reused across its retries.
import { CapsuleError, DigestMismatchError, errorFor, NetworkError, TimeoutError, type ErrorBody } from './errors.js';
import type * as T from './types.gen.js';

export interface Timeouts {
  /** POST /v1/capsules (default 30 s). */
  create: number;
  /** exec calls (default 120 s). */
  exec: number;
  /** POST /v1/verify (default 60 s). */
  verify: number;
  /** everything else (default 30 s). */
  default: number;
}

export interface ClientOptions {
  /** Service address; default CAPSULE_BASE_URL from the environment (Node). */
  baseUrl?: string;
  /** API key; default CAPSULE_API_KEY from the environment (Node). */
  apiKey?: string;
  /** Retries after the first attempt (default 4). */
  maxRetries?: number;
  /** First backoff step in ms (default 500); step n is base * 2^n, capped. */
  backoffBaseMs?: number;
  /** Cap of one wait in ms (default 30 000). */
  backoffCapMs?: number;
  timeouts?: Partial<Timeouts>;
  /** Sent as X-Svc-Trace-Id on every call unless a call gives its own. */
  traceId?: string;
  /** Injected for tests: fetch, randomness in [0, 1), sleep and key generation. */
  fetch?: typeof fetch;
  random?: () => number;
  sleep?: (ms: number) => Promise<void>;
  newIdempotencyKey?: () => string;
}

export interface CallOptions {
  /** Overrides the time-out of this call (ms, per attempt). */
  timeoutMs?: number;
  traceId?: string;
  /** Use this key instead of a generated one (only on idempotent POSTs). */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

interface Request {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  query?: Record<string, string | number | undefined>;
  json?: unknown;
  bytes?: Uint8Array;
  /** Idempotency-Key generated once per call and reused across retries. */
  idempotent?: boolean;
  timeout: keyof Timeouts;
  raw?: boolean;
}

export interface RawResponse {
  status: number;
  headers: Headers;
  bytes: Uint8Array;
}

/** One page of a list endpoint. */
export interface Page<I> {
  items: I[];
  next_cursor: string | null;
}

const env = (name: string): string | undefined =>
  (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];

const enc = encodeURIComponent;

function retryAfterHeader(h: Headers): number | null {
  const v = h.get('retry-after');
  if (v === null) return null;
  if (/^\d+$/.test(v.trim())) return Number(v.trim());
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, Math.ceil((at - Date.now()) / 1000)) : null;
}

async function sha512Hex(bytes: Uint8Array): Promise<string> {
  const d = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-512', new Uint8Array(bytes)));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

export class CapsuleClient {
  readonly baseUrl: string;
  readonly maxRetries: number;
  readonly timeouts: Timeouts;
  private readonly apiKey: string | undefined;
  private readonly backoffBaseMs: number;
  private readonly backoffCapMs: number;
  private readonly traceId: string | undefined;
  private readonly fetchImpl: typeof fetch;
  private readonly random: () => number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly newKey: () => string;

  constructor(opts: ClientOptions = {}) {
    const base = opts.baseUrl ?? env('CAPSULE_BASE_URL');
    if (!base) throw new Error('CapsuleClient: baseUrl (or CAPSULE_BASE_URL) is required');
    this.baseUrl = base.replace(/\/+$/, '');
    this.apiKey = opts.apiKey ?? env('CAPSULE_API_KEY');
    this.maxRetries = opts.maxRetries ?? 4;
    this.backoffBaseMs = opts.backoffBaseMs ?? 500;
    this.backoffCapMs = opts.backoffCapMs ?? 30_000;
    this.timeouts = { create: 30_000, exec: 120_000, verify: 60_000, default: 30_000, ...opts.timeouts };
    this.traceId = opts.traceId;
    this.fetchImpl = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.random = opts.random ?? Math.random;
    this.sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.newKey = opts.newIdempotencyKey ?? (() => globalThis.crypto.randomUUID());
  }

  /** Full-jitter backoff for retry `n` (0-based): uniform in [0, min(cap, base * 2^n)). */
  backoffMs(n: number): number {
    return Math.floor(this.random() * Math.min(this.backoffCapMs, this.backoffBaseMs * 2 ** n));
  }

  private url(path: string, query?: Request['query']): string {
    const q = Object.entries(query ?? {}).filter(([, v]) => v !== undefined && v !== '');
    const qs = q.length ? `?${q.map(([k, v]) => `${enc(k)}=${enc(String(v))}`).join('&')}` : '';
    return `${this.baseUrl}${path}${qs}`;
  }

  /** Sends one logical call, retrying as described above; resolves to the raw answer of a 2xx. */
  async send(req: Request, call: CallOptions = {}): Promise<RawResponse> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.apiKey) headers['authorization'] = `Bearer ${this.apiKey}`;
    const trace = call.traceId ?? this.traceId;
    if (trace) headers['x-svc-trace-id'] = trace;
    if (req.idempotent) headers['idempotency-key'] = call.idempotencyKey ?? this.newKey();
    let body: RequestInit['body'];
    if (req.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(req.json);
    } else if (req.bytes !== undefined) {
      headers['content-type'] = 'application/octet-stream';
      body = req.bytes as RequestInit['body'];
    }
    // A POST the service does not replay may have run when the answer is lost or a 500:
    // it is retried only on answers that say it did not run (429, 503).
    const replayable = req.method !== 'POST' || req.idempotent === true;
    const timeoutMs = call.timeoutMs ?? this.timeouts[req.timeout];
    const url = this.url(req.path, req.query);
    for (let attempt = 0; ; attempt++) {
      let err: CapsuleError;
      let retryable: boolean;
      try {
        const signals = [AbortSignal.timeout(timeoutMs), ...(call.signal ? [call.signal] : [])];
        const res = await this.fetchImpl(url, {
          method: req.method,
          headers,
          ...(body !== undefined ? { body } : {}),
          signal: AbortSignal.any(signals),
        });
        const bytes = new Uint8Array(await res.arrayBuffer());
        if (res.status < 400) return { status: res.status, headers: res.headers, bytes };
        let envelope: ErrorBody = { message: `HTTP ${res.status}` };
        try {
          const parsed = JSON.parse(new TextDecoder().decode(bytes)) as { error?: ErrorBody };
          if (parsed && typeof parsed.error === 'object') envelope = parsed.error;
        } catch {
          /* not an envelope: keep the status */
        }
        err = errorFor(res.status, envelope, retryAfterHeader(res.headers));
        retryable = res.status === 429 || res.status === 503 || (res.status >= 500 && replayable);
      } catch (e) {
        if (call.signal?.aborted) throw e;
        const timedOut = e instanceof Error && (e.name === 'TimeoutError' || e.name === 'AbortError');
        err = timedOut
          ? new TimeoutError(0, { code: 'timeout', message: `no answer within ${timeoutMs} ms` }, null, e)
          : new NetworkError(
              0,
              { code: 'network_error', message: e instanceof Error ? e.message : String(e) },
              null,
              e,
            );
        retryable = replayable;
      }
      err.attempts = attempt + 1;
      if (!retryable || attempt >= this.maxRetries) throw err;
      const wait =
        err.retryAfter !== null ? Math.min(this.backoffCapMs, err.retryAfter * 1000) : this.backoffMs(attempt);
      await this.sleep(wait);
    }
  }

  private async json<R>(req: Request, call?: CallOptions): Promise<R> {
    const r = await this.send(req, call);
    if (r.status === 204 || r.bytes.length === 0) return undefined as R;
    return JSON.parse(new TextDecoder().decode(r.bytes)) as R;
  }

  /** Async iteration over every item of a paged list. */
  private async *pages<I>(path: string, query: Request['query'] = {}, call?: CallOptions): AsyncGenerator<I> {
    let cursor: string | null | undefined;
    do {
      const p = await this.json<Page<I>>(
        { method: 'GET', path, query: { ...query, ...(cursor ? { cursor } : {}) }, timeout: 'default' },
        call,
      );
      yield* p.items;
      cursor = p.next_cursor;
    } while (cursor);
  }

  // --- Public endpoints.
  signup(body: T.SignupRequest, call?: CallOptions): Promise<T.Signup> {
    return this.json({ method: 'POST', path: '/v1/signup', json: body, timeout: 'default' }, call);
  }
  contact(body: T.ContactRequest, call?: CallOptions): Promise<T.ContactReceived> {
    return this.json({ method: 'POST', path: '/v1/contact', json: body, timeout: 'default' }, call);
  }
  health(call?: CallOptions): Promise<T.Health> {
    return this.json({ method: 'GET', path: '/v1/health', timeout: 'default' }, call);
  }
  ready(call?: CallOptions): Promise<T.Ready> {
    return this.json({ method: 'GET', path: '/v1/health/ready', timeout: 'default' }, call);
  }
  openapi(call?: CallOptions): Promise<Record<string, unknown>> {
    return this.json({ method: 'GET', path: '/v1/openapi.json', timeout: 'default' }, call);
  }
  /** Online verification (POST /v1/verify); see verifyProof for the offline one. */
  verifyOnline(cdp: unknown, call?: CallOptions): Promise<T.VerifyResult> {
    return this.json({ method: 'POST', path: '/v1/verify', json: { cdp }, timeout: 'verify' }, call);
  }
  /** The public canonical AuditProof (with activity) of a destroyed capsule. */
  publicProof(capsuleId: string, opts: { presentation?: boolean } = {}, call?: CallOptions): Promise<T.ProofDocument> {
    const query = opts.presentation ? { format: 'presentation' } : {};
    return this.json(
      { method: 'GET', path: `/v1/capsules/${enc(capsuleId)}/cdp/verify`, query, timeout: 'default' },
      call,
    );
  }
  key(keyId: string, call?: CallOptions): Promise<T.KeyRecord> {
    return this.json({ method: 'GET', path: `/v1/keys/${enc(keyId)}`, timeout: 'default' }, call);
  }
  errorDoc(code: string, call?: CallOptions): Promise<T.ErrorDoc> {
    return this.json({ method: 'GET', path: `/docs/errors/${enc(code)}`, timeout: 'default' }, call);
  }

  // --- Capsules.
  createCapsule(body: T.CreateCapsuleRequest = {}, call?: CallOptions): Promise<T.CapsuleCreated> {
    return this.json({ method: 'POST', path: '/v1/capsules', json: body, idempotent: true, timeout: 'create' }, call);
  }
  getCapsule(id: string, call?: CallOptions): Promise<T.Capsule> {
    return this.json({ method: 'GET', path: `/v1/capsules/${enc(id)}`, timeout: 'default' }, call);
  }
  listCapsules(opts: { limit?: number } = {}, call?: CallOptions): AsyncGenerator<T.Capsule> {
    return this.pages('/v1/capsules', { limit: opts.limit }, call);
  }
  exec(id: string, body: T.ExecRequest, call?: CallOptions): Promise<T.ExecResult> {
    return this.json({ method: 'POST', path: `/v1/capsules/${enc(id)}/exec`, json: body, timeout: 'exec' }, call);
  }
  upload(id: string, filename: string, bytes: Uint8Array | string, call?: CallOptions): Promise<T.UploadResult> {
    const data = typeof bytes === 'string' ? new TextEncoder().encode(bytes) : bytes;
    return this.json(
      { method: 'POST', path: `/v1/capsules/${enc(id)}/upload`, query: { filename }, bytes: data, timeout: 'default' },
      call,
    );
  }
  listOutput(id: string, call?: CallOptions): Promise<T.OutputList> {
    return this.json({ method: 'GET', path: `/v1/capsules/${enc(id)}/output`, timeout: 'default' }, call);
  }
  /** One output file; its SHA-512 is checked against X-Svc-File-Sha512 (DigestMismatchError). */
  async download(id: string, filename: string, call?: CallOptions): Promise<Uint8Array> {
    const r = await this.send(
      { method: 'GET', path: `/v1/capsules/${enc(id)}/output/${enc(filename)}`, timeout: 'default' },
      call,
    );
    const expected = r.headers.get('x-svc-file-sha512');
    const actual = `sha512:${await sha512Hex(r.bytes)}`;
    if (expected === null || expected !== actual)
      throw new DigestMismatchError(r.status, {
        code: 'digest_mismatch',
        message: `${filename}: SHA-512 ${actual} differs from X-Svc-File-Sha512 ${expected}`,
        request_id: r.headers.get('x-svc-request-id') ?? undefined,
      });
    return r.bytes;
  }
  destroy(id: string, call?: CallOptions): Promise<T.DestroyResult> {
    return this.json({ method: 'DELETE', path: `/v1/capsules/${enc(id)}`, timeout: 'default' }, call);
  }
  /** The private AuditRecord of a destroyed capsule. */
  record(id: string, call?: CallOptions): Promise<T.ProofDocument> {
    return this.json({ method: 'GET', path: `/v1/capsules/${enc(id)}/cdp`, timeout: 'default' }, call);
  }
  proof(capsuleId: string, call?: CallOptions): Promise<T.ProofRecord> {
    return this.json({ method: 'GET', path: `/v1/proofs/${enc(capsuleId)}`, timeout: 'default' }, call);
  }
  me(call?: CallOptions): Promise<T.Customer> {
    return this.json({ method: 'GET', path: '/v1/customers/me', timeout: 'default' }, call);
  }

  // --- Capsulefiles.
  createCapsulefile(body: T.CapsulefileRequest, call?: CallOptions): Promise<T.CapsulefileCreated> {
    return this.json(
      { method: 'POST', path: '/v1/capsulefiles', json: body, idempotent: true, timeout: 'default' },
      call,
    );
  }
  listCapsulefiles(opts: { limit?: number } = {}, call?: CallOptions): AsyncGenerator<T.CapsulefileItem> {
    return this.pages('/v1/capsulefiles', { limit: opts.limit }, call);
  }
  getCapsulefile(id: string, call?: CallOptions): Promise<T.Capsulefile> {
    return this.json({ method: 'GET', path: `/v1/capsulefiles/${enc(id)}`, timeout: 'default' }, call);
  }
  updateCapsulefile(id: string, patch: T.CapsulefilePatch, call?: CallOptions): Promise<T.Capsulefile> {
    return this.json({ method: 'PATCH', path: `/v1/capsulefiles/${enc(id)}`, json: patch, timeout: 'default' }, call);
  }
  addCapsulefileFile(
    id: string,
    filename: string,
    bytes: Uint8Array | string,
    call?: CallOptions,
  ): Promise<T.CapsulefileFile> {
    const data = typeof bytes === 'string' ? new TextEncoder().encode(bytes) : bytes;
    return this.json(
      {
        method: 'POST',
        path: `/v1/capsulefiles/${enc(id)}/files`,
        query: { filename },
        bytes: data,
        timeout: 'default',
      },
      call,
    );
  }
  finalizeCapsulefile(id: string, call?: CallOptions): Promise<T.CapsulefileFinalized> {
    return this.json(
      { method: 'POST', path: `/v1/capsulefiles/${enc(id)}/finalize`, idempotent: true, timeout: 'default' },
      call,
    );
  }
  deleteCapsulefile(id: string, call?: CallOptions): Promise<void> {
    return this.json({ method: 'DELETE', path: `/v1/capsulefiles/${enc(id)}`, timeout: 'default' }, call);
  }

  // --- Session-named variant.
  createSession(body: T.CreateSessionRequest = {}, call?: CallOptions): Promise<T.SessionCreated> {
    return this.json({ method: 'POST', path: '/v1/sessions', json: body, timeout: 'create' }, call);
  }
  getSession(id: string, call?: CallOptions): Promise<T.Session> {
    return this.json({ method: 'GET', path: `/v1/sessions/${enc(id)}`, timeout: 'default' }, call);
  }
  sessionExec(id: string, body: T.SessionExecRequest, call?: CallOptions): Promise<T.SessionExecResult> {
    return this.json({ method: 'POST', path: `/v1/sessions/${enc(id)}/exec`, json: body, timeout: 'exec' }, call);
  }
  destroySession(id: string, call?: CallOptions): Promise<T.SessionDestroyed> {
    return this.json({ method: 'DELETE', path: `/v1/sessions/${enc(id)}`, timeout: 'default' }, call);
  }

  // --- Egress profiles and rules.
  createEgressProfile(body: T.EgressProfileRequest, call?: CallOptions): Promise<T.EgressProfile> {
    return this.json(
      { method: 'POST', path: '/v1/egress/profiles', json: body, idempotent: true, timeout: 'default' },
      call,
    );
  }
  listEgressProfiles(opts: { limit?: number } = {}, call?: CallOptions): AsyncGenerator<T.EgressProfile> {
    return this.pages('/v1/egress/profiles', { limit: opts.limit }, call);
  }
  getEgressProfile(id: string, call?: CallOptions): Promise<T.EgressProfileDetail> {
    return this.json({ method: 'GET', path: `/v1/egress/profiles/${enc(id)}`, timeout: 'default' }, call);
  }
  updateEgressProfile(id: string, body: T.EgressProfileUpdate, call?: CallOptions): Promise<T.EgressProfileDetail> {
    return this.json({ method: 'PUT', path: `/v1/egress/profiles/${enc(id)}`, json: body, timeout: 'default' }, call);
  }
  deleteEgressProfile(id: string, call?: CallOptions): Promise<void> {
    return this.json({ method: 'DELETE', path: `/v1/egress/profiles/${enc(id)}`, timeout: 'default' }, call);
  }
  addEgressRule(profileId: string, body: T.EgressRuleRequest, call?: CallOptions): Promise<T.EgressRule> {
    return this.json(
      {
        method: 'POST',
        path: `/v1/egress/profiles/${enc(profileId)}/rules`,
        json: body,
        idempotent: true,
        timeout: 'default',
      },
      call,
    );
  }
  listEgressRules(profileId: string, opts: { limit?: number } = {}, call?: CallOptions): AsyncGenerator<T.EgressRule> {
    return this.pages(`/v1/egress/profiles/${enc(profileId)}/rules`, { limit: opts.limit }, call);
  }
  deleteEgressRule(profileId: string, ruleId: string, call?: CallOptions): Promise<void> {
    return this.json(
      { method: 'DELETE', path: `/v1/egress/profiles/${enc(profileId)}/rules/${enc(ruleId)}`, timeout: 'default' },
      call,
    );
  }
  listAllEgressRules(opts: { limit?: number } = {}, call?: CallOptions): AsyncGenerator<T.EgressRule> {
    return this.pages('/v1/egress', { limit: opts.limit }, call);
  }
  addDefaultEgressRule(body: T.EgressRuleRequest, call?: CallOptions): Promise<T.EgressRule> {
    return this.json({ method: 'POST', path: '/v1/egress', json: body, idempotent: true, timeout: 'default' }, call);
  }
  deleteAnyEgressRule(ruleId: string, call?: CallOptions): Promise<void> {
    return this.json({ method: 'DELETE', path: `/v1/egress/${enc(ruleId)}`, timeout: 'default' }, call);
  }

  // --- API keys and MFA.
  listApiKeys(opts: { limit?: number } = {}, call?: CallOptions): AsyncGenerator<T.ApiKey> {
    return this.pages('/v1/api-keys', { limit: opts.limit }, call);
  }
  createApiKey(body: T.CreateApiKeyRequest = {}, call?: CallOptions): Promise<T.ApiKeyCreated> {
    return this.json({ method: 'POST', path: '/v1/api-keys', json: body, timeout: 'default' }, call);
  }
  revokeApiKey(id: string, call?: CallOptions): Promise<T.ApiKeyRevoked> {
    return this.json({ method: 'DELETE', path: `/v1/api-keys/${enc(id)}`, timeout: 'default' }, call);
  }
  rotateApiKey(id: string, body: T.RotateApiKeyRequest = {}, call?: CallOptions): Promise<T.ApiKeyCreated> {
    return this.json({ method: 'POST', path: `/v1/api-keys/${enc(id)}/rotate`, json: body, timeout: 'default' }, call);
  }
  mfaStatus(call?: CallOptions): Promise<T.MfaStatus> {
    return this.json({ method: 'GET', path: '/v1/mfa', timeout: 'default' }, call);
  }
  mfaEnroll(call?: CallOptions): Promise<T.MfaEnrollment> {
    return this.json({ method: 'POST', path: '/v1/mfa/enroll', json: {}, timeout: 'default' }, call);
  }
  mfaActivate(code: string, call?: CallOptions): Promise<T.MfaActivated> {
    return this.json({ method: 'POST', path: '/v1/mfa/activate', json: { code }, timeout: 'default' }, call);
  }
  mfaVerify(code: string, call?: CallOptions): Promise<T.MfaVerified> {
    return this.json({ method: 'POST', path: '/v1/mfa/verify', json: { code }, timeout: 'default' }, call);
  }
  mfaRemove(call?: CallOptions): Promise<void> {
    return this.json({ method: 'DELETE', path: '/v1/mfa', timeout: 'default' }, call);
  }

  // --- Usage and billing.
  usageSummary(call?: CallOptions): Promise<T.UsageSummary> {
    return this.json({ method: 'GET', path: '/v1/usage/summary', timeout: 'default' }, call);
  }
  usageEstimate(call?: CallOptions): Promise<T.UsageEstimate> {
    return this.json({ method: 'GET', path: '/v1/usage/estimate', timeout: 'default' }, call);
  }
  usageItems(
    opts: { limit?: number; from?: string; to?: string } = {},
    call?: CallOptions,
  ): AsyncGenerator<T.UsageItem> {
    return this.pages('/v1/usage/items', { limit: opts.limit, from: opts.from, to: opts.to }, call);
  }
  async usageItemsCsv(opts: { from?: string; to?: string } = {}, call?: CallOptions): Promise<string> {
    const r = await this.send(
      { method: 'GET', path: '/v1/usage/items.csv', query: { from: opts.from, to: opts.to }, timeout: 'default' },
      call,
    );
    return new TextDecoder().decode(r.bytes);
  }
  checkout(tier: string, call?: CallOptions): Promise<T.Checkout> {
    return this.json(
      { method: 'POST', path: '/v1/billing/checkout', json: { tier }, idempotent: true, timeout: 'default' },
      call,
    );
  }
}
