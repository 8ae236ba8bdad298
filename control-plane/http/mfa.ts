// The MFA gate as middleware, mounted after auth on every endpoint that needs
// a recent MFA verification: API-key writes, MFA removal, webhook writes and
// /v1/admin/*. Paid tiers without MFA get 403 mfa_enrollment_required; an
// enrolled account whose key was not verified in the last 15 minutes gets
// 403 mfa_required (SPEC "Authentication" 7).
import { caller, type AppDeps, type Mw } from './context.js';

export function requireMfa(d: AppDeps): Mw {
  return async (ctx, next) => {
    d.services.mfa.requireRecentVerification(caller(ctx));
    await next();
  };
}
