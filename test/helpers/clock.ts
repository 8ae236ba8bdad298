// A clock a test moves by hand: schedules of minutes or hours run in milliseconds.
import { isoMicros } from '../../shared/time.js';
import type { Clock } from '../../control-plane/domain/index.js';

export class ManualClock implements Clock {
  constructor(public ms = Date.now()) {}
  nowMs(): number {
    return this.ms;
  }
  nowIso(): string {
    return isoMicros(this.ms);
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}
