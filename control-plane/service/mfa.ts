// TOTP multi-factor authentication (RFC 6238, through otplib): enrollment
// with one-time recovery codes, activation, per-key verification for 15
// minutes, removal, and the gate the sensitive endpoints use. The secret is
// sealed at rest (SecretBox); recovery codes are stored as SHA-256 only.
import { createHash } from 'node:crypto';
import { generateURI, ScureBase32Plugin, verify } from 'otplib';
import { ApiError, invalid } from '../../shared/errors.js';
import type { Caller, MfaFactor } from '../domain/index.js';
import { isoMicros } from './clock.js';
import type { Deps } from './deps.js';

/** How long one verification lets the calling key pass the gate. */
export const MFA_VERIFIED_MS = 15 * 60_000;
/** Code attempts per account per window (a correct code gives the budget back). */
export const MFA_MAX_ATTEMPTS = 5;
export const MFA_ATTEMPT_WINDOW_MS = 15 * 60_000;
export const RECOVERY_CODE_COUNT = 10;
/** Issuer shown by authenticator apps. */
export const TOTP_ISSUER = 'Capsule';

const TOTP_RE = /^\d{6}$/;
/** Ten base32 characters (50 bits), shown as two groups of five. */
const RECOVERY_RE = /^[a-z2-7]{5}-?[a-z2-7]{5}$/;
const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const base32 = new ScureBase32Plugin();

/** Binds the sealed secret to its account (SecretBox context). */
export const totpContext = (customerId: string): string => `mfa:${customerId}:totp_secret`;
const hashRecoveryCode = (code: string): string =>
  createHash('sha256').update(code.replace('-', ''), 'utf8').digest('hex');

export class MfaService {
  constructor(private readonly d: Deps) {}

  /**
   * The gate of sensitive endpoints: an enrolled account needs the calling key
   * verified in the last 15 minutes; a paid account must be enrolled first.
   */
  requireRecentVerification(caller: Caller): void {
    if (caller.mfa !== 'active') {
      if (caller.account.tier !== 'free')
        throw new ApiError(
          'mfa_enrollment_required',
          'this endpoint needs MFA: enroll with POST /v1/mfa/enroll and activate it',
        );
      return;
    }
    const until = caller.mfa_verified_until;
    if (until === null || until <= isoMicros(this.d.clock.nowMs()))
      throw new ApiError('mfa_required', 'this endpoint needs a recent MFA verification: POST /v1/mfa/verify');
  }

  async status(caller: Caller): Promise<Record<string, unknown>> {
    const f = await this.d.keys.getMfa(caller.account.customer_id);
    const until = caller.mfa_verified_until;
    return {
      status: f?.state ?? 'none',
      activated_at: f?.activated_at ?? null,
      recovery_codes_remaining: f?.state === 'active' ? f.recovery_codes_remaining : null,
      verified_until: f?.state === 'active' && until !== null && until > this.d.clock.nowIso() ? until : null,
    };
  }

  async enroll(caller: Caller): Promise<Record<string, unknown>> {
    const a = caller.account;
    const secret = base32.encode(this.d.random(20));
    const codes = Array.from({ length: RECOVERY_CODE_COUNT }, () => this.recoveryCode());
    const factor: MfaFactor = {
      customer_id: a.customer_id,
      secret_sealed: this.d.secrets.sealString(secret, totpContext(a.customer_id)),
      state: 'pending',
      created_at: this.d.clock.nowIso(),
      activated_at: null,
      last_step: null,
      recovery_codes_remaining: codes.length,
    };
    if ((await this.d.keys.putPendingMfa(factor, codes.map(hashRecoveryCode))) === 'active')
      throw new ApiError(
        'resource_conflict',
        'MFA is already active: remove it (DELETE /v1/mfa) before enrolling again',
      );
    this.d.log.info({ customer_id: a.customer_id }, 'mfa enrollment started');
    return {
      status: 'pending',
      secret,
      otpauth_url: generateURI({ issuer: TOTP_ISSUER, label: a.email, secret }),
      recovery_codes: codes,
      warning: 'Store the recovery codes now: each works once and they are not shown again.',
    };
  }

  async activate(caller: Caller, code: string): Promise<Record<string, unknown>> {
    const f = await this.factor(caller, 'pending');
    await this.check(caller, f, code, false);
    const now = this.d.clock.nowIso();
    if (!(await this.d.keys.activateMfa(f.customer_id, now)))
      throw new ApiError('resource_conflict', 'MFA enrollment changed meanwhile: enroll again');
    const until = await this.markVerified(caller);
    this.d.log.info({ customer_id: f.customer_id }, 'mfa activated');
    return { status: 'active', activated_at: now, verified_until: until };
  }

  async verify(caller: Caller, code: string): Promise<Record<string, unknown>> {
    const f = await this.factor(caller, 'active');
    const method = await this.check(caller, f, code, true);
    const until = await this.markVerified(caller);
    return {
      verified: true,
      method,
      verified_until: until,
      recovery_codes_remaining: f.recovery_codes_remaining - (method === 'recovery_code' ? 1 : 0),
    };
  }

  async remove(caller: Caller): Promise<void> {
    if (!(await this.d.keys.deleteMfa(caller.account.customer_id)))
      throw new ApiError('resource_not_found', 'MFA is not enrolled');
    this.d.log.info({ customer_id: caller.account.customer_id }, 'mfa removed');
  }

  private async factor(caller: Caller, want: MfaFactor['state']): Promise<MfaFactor> {
    const f = await this.d.keys.getMfa(caller.account.customer_id);
    if (f?.state === want) return f;
    if (!f) throw new ApiError('resource_conflict', 'MFA is not enrolled: POST /v1/mfa/enroll first');
    throw new ApiError(
      'resource_conflict',
      f.state === 'active' ? 'MFA is already active' : 'MFA enrollment is not activated yet: POST /v1/mfa/activate',
    );
  }

  /**
   * Spends one attempt, then accepts a TOTP code of the current step (one step
   * of clock drift either way) not used before, or an unused recovery code.
   */
  private async check(
    caller: Caller,
    f: MfaFactor,
    raw: string,
    allowRecovery: boolean,
  ): Promise<'totp' | 'recovery_code'> {
    const nowMs = this.d.clock.nowMs();
    const windowStarted = await this.d.keys.takeMfaAttempt(
      f.customer_id,
      isoMicros(nowMs),
      isoMicros(nowMs - MFA_ATTEMPT_WINDOW_MS),
      MFA_MAX_ATTEMPTS,
    );
    if (windowStarted !== null) {
      const wait = Math.max(1, Math.ceil((Date.parse(windowStarted) + MFA_ATTEMPT_WINDOW_MS - nowMs) / 1000));
      throw new ApiError('rate_limited', `too many MFA codes tried: at most ${MFA_MAX_ATTEMPTS} per 15 minutes`, {
        extra: { retry_after: wait },
      });
    }
    const code = raw.replace(/\s+/g, '').toLowerCase();
    let method: 'totp' | 'recovery_code' | null = null;
    if (TOTP_RE.test(code)) {
      const secret = this.d.secrets.openString(f.secret_sealed, totpContext(f.customer_id));
      const r = await verify({ secret, token: code, epoch: Math.floor(nowMs / 1000), epochTolerance: 30 });
      // The step is taken atomically: the same code twice (or an older one) fails.
      if (r.valid && 'timeStep' in r && (await this.d.keys.acceptTotpStep(f.customer_id, r.timeStep))) method = 'totp';
    } else if (allowRecovery && RECOVERY_RE.test(code)) {
      if (await this.d.keys.useRecoveryCode(f.customer_id, hashRecoveryCode(code), isoMicros(nowMs)))
        method = 'recovery_code';
    }
    if (method === null) {
      this.d.log.warn({ customer_id: caller.account.customer_id, key_id: caller.key_id }, 'mfa code refused');
      throw invalid('code', 'incorrect, expired or already used');
    }
    await this.d.keys.resetMfaAttempts(f.customer_id);
    return method;
  }

  private async markVerified(caller: Caller): Promise<string> {
    const until = isoMicros(this.d.clock.nowMs() + MFA_VERIFIED_MS);
    await this.d.keys.markMfaVerified(caller.key_id, until);
    return until;
  }

  private recoveryCode(): string {
    const chars = Array.from(this.d.random(10), (b) => BASE32[b & 31]).join('');
    return `${chars.slice(0, 5)}-${chars.slice(5)}`;
  }
}
