// Translates runner failures into API errors. Runner messages name the field
// for `invalid`; other causes are logged at the edge, never sent. Only an
// unreachable runner is a 503 (retry later); anything unexpected is a 500, so
// clients do not retry a bug.
import { ApiError } from '../../shared/errors.js';
import { RunnerError } from '../../shared/runner-protocol.js';

export function fromRunner(e: unknown, what: string): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof RunnerError) {
    switch (e.code) {
      case 'not_found':
        return new ApiError('resource_not_found', `${what} not found`, { cause: e });
      case 'invalid': {
        const field = /^([\w.]+):/.exec(e.message)?.[1];
        return new ApiError('invalid_parameters', e.message, { cause: e, extra: field ? { field } : {} });
      }
      case 'too_large':
        return new ApiError('payload_too_large', `${what}: exceeds the size bound`, { cause: e });
      case 'no_space':
        return new ApiError('payload_too_large', 'capsule storage is full', { cause: e });
      case 'busy':
        return new ApiError('capsule_expired', 'capsule is being destroyed', { cause: e });
      case 'capacity':
        // The node is full for now: a retryable 503 (Retry-After), never a reason to reconnect.
        return new ApiError('service_unavailable', 'the node is at capacity now; retry later', {
          cause: e,
          extra: { retry_after: 30 },
        });
      case 'unavailable':
        return new ApiError('service_unavailable', 'the capsule runner is unavailable', {
          cause: e,
          extra: { retry_after: 5 },
        });
      default:
        return new ApiError('internal_error', 'internal error', { cause: e });
    }
  }
  // The runner client reports a closed, refused or timed-out socket as RunnerError('unavailable'); anything else is a bug.
  return new ApiError('internal_error', 'internal error', { cause: e });
}
