// The runner's error: a closed set of codes and a message. Apart from the
// protocol schemas (zod) so that the exec thread loads it without them.
/** Closed set of runner error codes; the control plane maps them to API errors. */
export type RunnerErrorCode =
  | 'not_found' // no such live capsule
  | 'invalid' // bad name, bad path, bad argument (message names the field)
  | 'too_large' // upload or file over the bound
  | 'busy' // capsule is being destroyed
  | 'no_space' // tmpfs full
  | 'unavailable' // runner shutting down or unreachable
  | 'capacity' // the node cannot back another capsule now (memory, capsule count, uids); retry later
  | 'internal';

/** A runner error as the client surfaces it. */
export class RunnerError extends Error {
  readonly code: RunnerErrorCode;
  constructor(code: RunnerErrorCode, message: string) {
    super(message);
    this.name = 'RunnerError';
    this.code = code;
  }
}
